"""The upstream client against a raw TCP upstream that misbehaves: every broken answer is an
UpstreamMalformed, UpstreamUnavailable or UpstreamTimeout (never another exception, a hang,
or unbounded memory), and no byte of one response ever reaches another request."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from actors.upstream import UpstreamClient
from bench.upstream import UpstreamServer, serve_upstream
from protocol.errors import UpstreamError, UpstreamMalformed, UpstreamTimeout, UpstreamUnavailable
from tests.raw_upstream import (
    CLOSE,
    CORK,
    HANG,
    OK,
    UNCORK,
    Lazy,
    RawUpstream,
    Reply,
    chunked,
    ok,
    repeated,
    serve_raw_upstream,
)

READ_TIMEOUT = 0.5
MAX_RESPONSE = 1 << 20
H = b"HTTP/1.1 200 OK\r\n"


@pytest.fixture
async def raw() -> AsyncIterator[RawUpstream]:
    async with trio.open_nursery() as nursery:
        yield await nursery.start(serve_raw_upstream)
        nursery.cancel_scope.cancel()


def _client_of(raw: RawUpstream, *, connections: int, key: str | None) -> UpstreamClient:
    return UpstreamClient(
        "raw",
        "openai",
        f"{raw.url}/v1",
        key,
        max_connections=connections,
        max_keepalive_connections=connections,
        connect_timeout_s=2,
        read_timeout_s=READ_TIMEOUT,
        max_response_bytes=MAX_RESPONSE,
    )


@pytest.fixture
async def client(raw: RawUpstream) -> AsyncIterator[UpstreamClient]:
    client = _client_of(raw, connections=4, key="sk-test")
    yield client
    await client.aclose()


def _endless(block: bytes) -> Lazy:
    return Lazy(lambda: repeated(block, 1 << 30))


BAD = UpstreamMalformed
GONE = UpstreamUnavailable
CORPUS: dict[str, tuple[Reply, type[UpstreamError]]] = {
    "xchunked": ([H + b"Transfer-Encoding: xchunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"], BAD),
    "gzip, chunked": ([H + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"], BAD),
    "CL and TE": ([H + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc"], BAD),
    "TE and CL": ([H + b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n"], BAD),
    "duplicate CL": ([H + b"Content-Length: 3\r\nContent-Length: 3\r\n\r\nabc"], BAD),
    "conflicting CL": ([H + b"Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"], BAD),
    "CL list": ([H + b"Content-Length: 3, 3\r\n\r\nabc"], BAD),
    "CL +3": ([H + b"Content-Length: +3\r\n\r\nabc"], BAD),
    "CL -3": ([H + b"Content-Length: -3\r\n\r\nabc"], BAD),
    "CL 0_3": ([H + b"Content-Length: 0_3\r\n\r\nabc"], BAD),
    "CL overflow": ([H + b"Content-Length: 99999999999999999999999\r\n\r\n"], BAD),
    "chunk 0x3": ([H + b"Transfer-Encoding: chunked\r\n\r\n0x3\r\nabc\r\n0\r\n\r\n"], BAD),
    "chunk -3": ([H + b"Transfer-Encoding: chunked\r\n\r\n-3\r\nabc\r\n0\r\n\r\n"], BAD),
    "chunk without CRLF": ([H + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabcX"], BAD),
    "not HTTP": ([b"SSH-2.0-OpenSSH\r\n\r\n"], BAD),
    "HTTP/2.0 line": ([b"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\n{}"], BAD),
    "status 99": ([b"HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n\r\n{}"], BAD),
    "101 unasked": ([b"HTTP/1.1 101 Switching\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n"], BAD),
    "header without colon": ([H + b"broken header\r\nContent-Length: 2\r\n\r\n{}"], BAD),
    "obsolete line folding": ([H + b"X: a\r\n b\r\nContent-Length: 2\r\n\r\n{}"], BAD),
    "LF line ends": ([b"HTTP/1.1 200 OK\nContent-Length: 2\n\n{}"], BAD),
    "head past 64 KiB": ([H + b"X: ", _endless(b"a" * 4096)], BAD),
    "too many headers": ([H + b"X: 1\r\n" * 200 + b"Content-Length: 2\r\n\r\n{}"], BAD),
    "1xx flood": ([_endless(b"HTTP/1.1 100 Continue\r\n\r\n" * 1000)], BAD),
    "endless chunk size": (
        [H + b"Transfer-Encoding: chunked\r\n\r\n1;", _endless(b"x" * 4096)],
        BAD,
    ),
    "body past the maximum": ([H + b"Content-Length: 2000000\r\n\r\n"], BAD),
    "chunked body past the maximum": (
        [
            H + b"Transfer-Encoding: chunked\r\n\r\n",
            _endless(b"10000\r\n" + b"x" * 65536 + b"\r\n"),
        ],
        BAD,
    ),
    "closed mid-head": ([H + b"Content-Le", CLOSE], GONE),
    "closed mid-body": ([H + b"Content-Length: 10\r\n\r\nabc", CLOSE], GONE),
    "closed mid-chunk": ([H + b"Transfer-Encoding: chunked\r\n\r\n5\r\nab", CLOSE], GONE),
    "closed before any byte": ([CLOSE], GONE),
    "silent": ([HANG], UpstreamTimeout),
    "head dripped past the timeout": (
        [H, 0.3, b"X: 1\r\n", 0.3, b"Y: 2\r\n", HANG],
        UpstreamTimeout,
    ),
    "silent mid-body": ([H + b"Content-Length: 10\r\n\r\nabc", HANG], UpstreamTimeout),
}


@pytest.mark.parametrize("case", CORPUS)
async def test_a_broken_answer_is_an_upstream_error(
    client: UpstreamClient, raw: RawUpstream, case: str
) -> None:
    reply, error = CORPUS[case]
    raw.play(reply)
    with trio.fail_after(5), pytest.raises(UpstreamError) as caught:
        await client.post_json("chat", b"{}")
    # Its meaning (malformed, gone, silent), named for the provider; the pool's own classes
    # (actors/errors.py) are members of those.
    assert isinstance(caught.value, error) and caught.value.provider == "raw", caught.value
    # The pool is usable afterwards, on a fresh connection.
    with trio.fail_after(5):
        assert (await client.post_json("chat", b"{}"))[0] == b'{"ok":true}'


async def test_a_1xx_flood_fails_fast(client: UpstreamClient, raw: RawUpstream) -> None:
    raw.play([b"HTTP/1.1 100 Continue\r\n\r\n" * 100_000 + ok()])
    started = time.perf_counter()
    with pytest.raises(UpstreamMalformed, match="interim"):
        await client.post_json("chat", b"{}")
    assert time.perf_counter() - started < 1.0


async def test_few_interim_responses_are_skipped(client: UpstreamClient, raw: RawUpstream) -> None:
    raw.play(
        [b"HTTP/1.1 100 Continue\r\n\r\n" * 3, b"HTTP/1.1 103 Hints\r\nLink: x\r\n\r\n" + ok()]
    )
    assert (await client.post_json("chat", b"{}"))[0] == b'{"ok":true}'


async def test_bodies_framed_each_way(client: UpstreamClient, raw: RawUpstream) -> None:
    raw.play(
        [ok(b'{"a":1}')],
        [chunked(b'{"a"', b":2}")],
        [b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", b'{"a":3}', CLOSE],  # close-delimited
        [b"HTTP/1.0 200 OK\r\nContent-Length: 7\r\n\r\n", 0.05, b'{"a":4}'],
    )
    bodies = [(await client.post_json("chat", b"{}"))[0] for _ in range(5)]
    assert bodies == [b'{"a":1}', b'{"a":2}', b'{"a":3}', b'{"a":4}', b'{"ok":true}']
    # Kept alive after the first two; the close-delimited and HTTP/1.0 answers end theirs.
    assert raw.connections == 3


async def test_keep_alive_reuses_one_connection(client: UpstreamClient, raw: RawUpstream) -> None:
    for _ in range(5):
        await client.post_json("chat", b"{}")
    assert raw.connections == 1 and client.pool.opened == 1


async def test_stray_bytes_after_a_response_never_reach_the_next_request(
    client: UpstreamClient, raw: RawUpstream
) -> None:
    evil = ok(b'{"evil":true}')
    raw.play([ok(b'{"first":1}'), 0.05, evil])  # a later segment, once the client is idle
    assert (await client.post_json("chat", b"{}"))[0] == b'{"first":1}'
    await trio.sleep(0.2)
    raw.play([ok(b'{"second":2}')])
    assert (await client.post_json("chat", b"{}"))[0] == b'{"second":2}'
    assert client.pool.discarded == 1 and raw.connections == 2


async def test_stray_bytes_in_the_same_segment_close_the_connection(
    client: UpstreamClient, raw: RawUpstream
) -> None:
    raw.play([ok(b'{"first":1}') + ok(b'{"evil":true}')])
    assert (await client.post_json("chat", b"{}"))[0] == b'{"first":1}'
    assert (await client.post_json("chat", b"{}"))[0] == b'{"ok":true}'
    assert raw.connections == 2


async def test_an_idle_connection_closed_by_the_server_is_not_reused(
    client: UpstreamClient, raw: RawUpstream
) -> None:
    raw.play([ok(), CLOSE])
    await client.post_json("chat", b"{}")
    await trio.sleep(0.1)
    await client.post_json("chat", b"{}")
    assert client.pool.discarded == 1 and raw.connections == 2


async def test_a_reused_connection_closed_before_answering_is_retried(
    client: UpstreamClient, raw: RawUpstream
) -> None:
    raw.play(OK, [CLOSE])  # the server drops the second request unanswered (a keep-alive race)
    await client.post_json("chat", b"{}")
    assert (await client.post_json("chat", b"{}"))[0] == b'{"ok":true}'
    assert raw.connections == 2 and len(raw.requests) == 3


async def test_an_error_status_reads_only_the_start_of_its_body(
    client: UpstreamClient, raw: RawUpstream
) -> None:
    raw.play([b"HTTP/1.1 500 Oops\r\nContent-Length: 10000000\r\n\r\n", b"x" * 100_000, HANG])
    with trio.fail_after(5), pytest.raises(UpstreamError) as caught:
        await client.post_json("chat", b"{}")
    assert getattr(caught.value, "status", None) == 500


async def test_a_stream_is_read_chunk_by_chunk_past_the_maximum(
    client: UpstreamClient, raw: RawUpstream
) -> None:
    block = b"data: " + b"x" * 65_000 + b"\n\n"
    raw.play([chunked(*[block] * 20)])  # ~1.3 MB, over max_response_bytes: fine for a stream
    async with client.stream("chat", b"{}") as response:
        total = 0
        while chunk := await response.next_chunk():
            total += len(chunk)
    assert total == len(block) * 20


def _self_signed(tmp_path: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context for 127.0.0.1 and the certificate file a client must trust."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_file, key_file)
    return server, cert_file


async def test_over_tls_keep_alive_and_stray_records_never_reach_the_next_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_context, cert_file = _self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))  # honoured by the pool's context
    async with trio.open_nursery() as nursery:
        raw: RawUpstream = await nursery.start(partial(serve_raw_upstream, tls=server_context))
        client = _client_of(raw, connections=1, key=None)
        for _ in range(3):
            assert (await client.post_json("chat", b"{}"))[0] == b'{"ok":true}'
        assert raw.connections == 1 and client.pool.opened == 1
        # A stray answer as its own TLS record right after the response (often the same TCP
        # segment: trio then holds it undecrypted), then one in a later segment.
        evil = ok(b'{"evil":true}')
        raw.play([CORK, ok(b'{"a":1}'), evil, UNCORK], [ok(b'{"b":2}'), 0.05, evil])
        assert (await client.post_json("chat", b"{}"))[0] == b'{"a":1}'
        await trio.sleep(0.1)
        assert (await client.post_json("chat", b"{}"))[0] == b'{"b":2}'
        await trio.sleep(0.2)
        assert (await client.post_json("chat", b"{}"))[0] == b'{"ok":true}'
        assert client.pool.discarded == 2 and raw.connections == 3
        await client.aclose()
        nursery.cancel_scope.cancel()


async def test_an_untrusted_certificate_is_unavailable(tmp_path: Path) -> None:
    server_context, _ = _self_signed(tmp_path)
    async with trio.open_nursery() as nursery:
        raw: RawUpstream = await nursery.start(partial(serve_raw_upstream, tls=server_context))
        client = _client_of(raw, connections=1, key=None)
        with pytest.raises(UpstreamUnavailable, match="BrokenResourceError"):
            await client.post_json("chat", b"{}")
        await client.aclose()
        nursery.cancel_scope.cancel()


async def test_the_head_comes_with_the_body(client: UpstreamClient, raw: RawUpstream) -> None:
    raw.play([ok(extra=b"X-Request-Id: up-1\r\nx-request-id: up-2\r\n")])
    content, head = await client.post_json("chat", b"{}")
    assert content == b'{"ok":true}' and head.status == 200 and head.keep_alive
    assert head.headers["x-request-id"] == "up-1, up-2"
    assert head.headers["content-type"] == "application/json"


async def _blocks(
    count: int, produced: list[int], block: bytes = b"x" * 65536
) -> AsyncIterator[bytes]:
    for _ in range(count):
        produced[0] += 1
        yield block


async def test_a_streamed_body_arrives_whole_in_chunks() -> None:
    async with trio.open_nursery() as nursery:
        upstream: UpstreamServer = await nursery.start(serve_upstream)
        client = UpstreamClient(
            "sim",
            "openai",
            f"{upstream.url}/v1",
            "sk-test",
            max_connections=2,
            max_keepalive_connections=2,
            connect_timeout_s=2,
            read_timeout_s=READ_TIMEOUT,
            max_response_bytes=MAX_RESPONSE,
        )
        body = b'{"model": "sim-embed", "input": "' + b"word " * 50_000 + b'"}'

        async def pieces() -> AsyncIterator[bytes]:
            for start in range(0, len(body), 7_000):
                yield body[start : start + 7_000]
            yield b""  # an empty piece is skipped, not sent as the last chunk

        for _ in range(2):  # the connection goes back to the pool and serves the next one
            async with client.post_streamed(
                "embeddings", pieces(), content_type="application/json"
            ) as response:
                answer = await response.read(MAX_RESPONSE)
            assert b'"embedding"' in answer
        received = upstream.requests[-1]
        assert received.body == body
        assert received.headers["transfer-encoding"] == "chunked"
        assert received.headers["content-type"] == "application/json"
        assert received.headers["authorization"] == "Bearer sk-test"
        assert client.pool.opened == 2  # a streamed body always starts on a new connection
        await client.aclose()
        nursery.cancel_scope.cancel()


async def test_an_early_answer_stops_the_upload(client: UpstreamClient, raw: RawUpstream) -> None:
    # The upstream answers 413 after the head and reads nothing more: the client must take
    # the answer rather than block on a full socket, and stop producing the body.
    raw.play([b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 2\r\n\r\n{}", HANG])
    produced = [0]
    with trio.fail_after(5):
        with pytest.raises(UpstreamError) as caught:
            async with client.post_streamed(
                "audio/transcriptions", _blocks(16_384, produced), content_type="audio/wav"
            ):
                pass  # pragma: no cover - the 413 is raised on entry
    assert getattr(caught.value, "status", None) == 413
    assert produced[0] < 1_000  # not the 1 GiB the body would have been


async def test_a_failing_body_source_ends_the_request(
    client: UpstreamClient, raw: RawUpstream
) -> None:
    class ClientLeft(Exception):
        pass

    async def leaves() -> AsyncIterator[bytes]:
        yield b"first"
        raise ClientLeft

    raw.play([HANG])
    with trio.fail_after(5), pytest.raises(ClientLeft):
        async with client.post_streamed("x", leaves(), content_type="text/plain"):
            pass  # pragma: no cover
    assert client.stats.in_flight == 0


async def test_no_answer_after_the_body_times_out(client: UpstreamClient, raw: RawUpstream) -> None:
    raw.play([HANG])
    produced = [0]
    with trio.fail_after(5), pytest.raises(UpstreamTimeout):
        async with client.post_streamed("x", _blocks(3, produced), content_type="text/plain"):
            pass  # pragma: no cover
    assert produced[0] == 3


# -- keep-alive expiry ----------------------------------------------------------------------


async def _chat_ok(client: UpstreamClient) -> None:
    body = b'{"model":"sim-small","messages":[{"role":"user","content":"hi"}]}'
    content, _ = await client.post_json("chat/completions", body, api_key=None)
    assert b"chat.completion" in content


@pytest.mark.parametrize("expiry_s", [0.2, 60.0])
async def test_a_connection_idle_past_keepalive_expiry_is_not_reused(expiry_s: float) -> None:
    """A NAT that silently forgot an idle connection: with the connection idle past
    `keepalive_expiry_s` the next request opens a new one and succeeds at once; within the
    expiry (the control) it is reused and costs the read timeout."""
    from tests.tcp_forwarder import forwarding

    async with trio.open_nursery() as nursery:
        upstream: UpstreamServer = await nursery.start(serve_upstream)
        host, port = upstream.url.removeprefix("http://").split(":")
        async with forwarding(host, int(port)) as forwarder:
            client = UpstreamClient(
                "sim",
                "openai",
                f"http://127.0.0.1:{forwarder.port}/v1",
                "sk-test",
                max_connections=4,
                max_keepalive_connections=4,
                connect_timeout_s=0.5,
                read_timeout_s=1.0,
                max_response_bytes=MAX_RESPONSE,
                keepalive_expiry_s=expiry_s,
            )
            await _chat_ok(client)
            await trio.sleep(0.3)  # idle: past 0.2 s, within 60 s
            forwarder.drop_silently()
            began = trio.current_time()
            if expiry_s < 0.3:
                with trio.fail_after(0.5):  # at most one connect timeout
                    await _chat_ok(client)
                assert forwarder.connections == 2
                assert client.pool.expired == 1
            else:
                with pytest.raises(UpstreamTimeout):
                    await _chat_ok(client)
                assert trio.current_time() - began >= 1.0  # the read timeout, spent
            await client.aclose()
        nursery.cancel_scope.cancel()
