"""A served gateway in front of an upstream that breaks HTTP/1.1 (tests/raw_upstream.py): the
client gets 502 (504 for silence) as error JSON, never a 500 or a hang; memory stays bounded;
stray bytes from the upstream never reach another organization's request."""

from __future__ import annotations

import json
import resource
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trio

from protocol.credentials import CredentialKind
from tests.gateway.keys_client import error_of
from tests.harness import Gateway, gateway_config, running_gateway
from tests.inference import sse_frames
from tests.raw_upstream import (
    HANG,
    Lazy,
    RawUpstream,
    Reply,
    completion,
    ok,
    repeated,
    serve_raw_upstream,
)

MAX_RESPONSE = 8 << 20
MESSAGES = [{"role": "user", "content": "hi"}]
H = b"HTTP/1.1 200 OK\r\n"


def sse_chunk(content: str) -> bytes:
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "r",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


@dataclass
class Rig:
    gateway: Gateway
    raw: RawUpstream
    keys: list[str]  # one secret key in each of two organizations

    async def chat(self, key: str, **extra: object) -> httpx.Response:
        body = {"model": "r", "messages": MESSAGES, **extra}
        return await self.gateway.client.post(
            "/v1/chat/completions", json=body, headers=self.gateway.auth(key)
        )


async def _org_key(gw: Gateway, management_key: str) -> str:
    r = await gw.client.post("/v1/keys", json={"name": "all"}, headers=gw.auth(management_key))
    topup = await gw.client.post(
        "/v1/credits/topup", json={"amount_usd": 100}, headers=gw.auth(management_key)
    )
    assert topup.status_code == 200, topup.text
    key: str = r.json()["key"]
    return key


@pytest.fixture
async def rig(database_url: str, tmp_path: Path) -> AsyncIterator[Rig]:
    async with trio.open_nursery() as nursery:
        raw: RawUpstream = await nursery.start(serve_raw_upstream)
        toml = f"""
[[providers]]
name = "raw"
kind = "openai"
base_url = "{raw.url}/v1"
api_key = "sk-raw"
read_timeout_s = 0.5
max_response_bytes = {MAX_RESPONSE}

[[models]]
id = "r"
provider = "raw"
upstream = "r"
input_usd_per_mtok = 1
output_usd_per_mtok = 1
"""
        async with running_gateway(gateway_config(database_url, tmp_path, toml=toml)) as gw:
            storage = gw.runtime.storage
            other = await storage.orgs.create("other-org")
            credential = gw.runtime.hasher.generate(CredentialKind.MANAGEMENT)
            await storage.orgs.add_management_key(other.id, credential)
            keys = [await _org_key(gw, gw.management_key), await _org_key(gw, credential.value)]
            yield Rig(gw, raw, keys)
        nursery.cancel_scope.cancel()


MALFORMED: dict[str, Reply] = {
    "xchunked": [H + b"Transfer-Encoding: xchunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"],
    "CL and TE": [H + b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}"],
    "duplicate CL": [H + b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}"],
    "conflicting CL": [H + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}"],
    "CL +2": [H + b"Content-Length: +2\r\n\r\n{}"],
    "chunk 0x2": [H + b"Transfer-Encoding: chunked\r\n\r\n0x2\r\n{}\r\n0\r\n\r\n"],
    "1xx flood": [b"HTTP/1.1 100 Continue\r\n\r\n" * 100_000],
    # Well framed, but not a chat completion:
    "JSON array": [ok(b"[1, 2]")],
    "not JSON": [ok(b"<html>")],
    "nested 100,000 deep": [ok(b'{"choices":' + b"[" * 100_000 + b"]" * 100_000 + b"}")],
}


@pytest.mark.parametrize("case", MALFORMED)
async def test_a_malformed_answer_is_502(rig: Rig, case: str) -> None:
    rig.raw.play(MALFORMED[case])
    with trio.fail_after(10):
        r = await rig.chat(rig.keys[0])
    assert r.status_code == 502, r.text
    error = error_of(r)
    assert error["type"] == "upstream_error" and error["code"] == "upstream_bad_response"


@pytest.mark.parametrize("body", [b"[1, 2]", b'{"data":' + b"[" * 100_000 + b"]" * 100_000 + b"}"])
async def test_an_embeddings_answer_that_is_not_an_object_is_502(rig: Rig, body: bytes) -> None:
    rig.raw.play([ok(body)])
    with trio.fail_after(10):
        r = await rig.gateway.client.post(
            "/v1/embeddings",
            json={"model": "r", "input": "hi"},
            headers=rig.gateway.auth(rig.keys[0]),
        )
    assert r.status_code == 502, r.text
    assert error_of(r)["code"] == "upstream_bad_response"


async def test_a_silent_upstream_is_504(rig: Rig) -> None:
    rig.raw.play([H, HANG])
    with trio.fail_after(10):
        r = await rig.chat(rig.keys[0])
    assert r.status_code == 504 and error_of(r)["code"] == "upstream_timeout"


async def test_stray_bytes_never_reach_another_organizations_request(rig: Rig) -> None:
    evil = ok(completion("for the first org only, sent late"))
    rig.raw.play([ok(completion("first")), 0.05, evil])
    r = await rig.chat(rig.keys[0])
    assert r.json()["choices"][0]["message"]["content"] == "first"
    await trio.sleep(0.2)  # the stray answer arrives on the idle pooled connection
    rig.raw.play([ok(completion("second"))])
    r = await rig.chat(rig.keys[1])
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == "second"
    assert rig.raw.connections == 2
    stats = rig.gateway.runtime.upstreams.statistics()["raw"]
    assert stats == {
        "requests": 2,
        "in_flight": 0,
        "errors": 0,
        "connections_opened": 2,
        "connections_discarded": 1,
        "connections_expired": 0,
        "connections_in_use": 0,
        "connections_idle": 1,  # the second, pooled again
        "max_connections": 100,
    }


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # no /proc: the peak


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_a_300_mb_answer_is_502_in_bounded_memory(rig: Rig, framing: str) -> None:
    total = 300 << 20
    block = b"x" * 65536
    if framing == "content-length":
        head = H + b"Content-Length: %d\r\n\r\n" % total
        blocks = Lazy(lambda: repeated(block, total))
    else:
        head = H + b"Transfer-Encoding: chunked\r\n\r\n"
        framed = b"10000\r\n" + block + b"\r\n"
        blocks = Lazy(lambda: repeated(framed, total))
    rig.raw.play([head, blocks])
    before = _rss_kib()
    peak = before
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:

        async def sample() -> None:
            nonlocal peak
            while True:
                peak = max(peak, _rss_kib())
                await trio.sleep(0.005)

        nursery.start_soon(sample)
        with trio.fail_after(20):
            r = await rig.chat(rig.keys[0])
        nursery.cancel_scope.cancel()
    assert r.status_code == 502 and error_of(r)["code"] == "upstream_bad_response"
    assert peak - before < 50 * 1024, f"RSS grew {peak - before} KiB"
    assert time.perf_counter() - started < 10


async def test_a_stream_broken_midway_ends_with_an_error_frame_then_done(rig: Rig) -> None:
    head = H + b"Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    good = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in (sse_chunk("a"), sse_chunk("b")))
    rig.raw.play([head + good, 0.05, b"zz\r\n"])  # then a chunk size that is no number
    with trio.fail_after(10):
        r = await rig.chat(rig.keys[0], stream=True)
    assert r.status_code == 200
    frames = sse_frames(r.text)
    assert frames[-1] == "[DONE]"
    assert json.loads(frames[-2])["error"]["type"] == "upstream_error"
    contents = [json.loads(f)["choices"][0]["delta"].get("content") for f in frames[:-2]]
    assert contents == ["a", "b"]


async def test_a_stream_event_that_never_ends_is_cut_at_the_event_bound(rig: Rig) -> None:
    head = H + b"Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    line = b"x" * 65536
    framed = b"10000\r\n" + line + b"\r\n"
    rig.raw.play([head + b"6\r\ndata: \r\n", Lazy(lambda: repeated(framed, 1 << 30))])
    with trio.fail_after(10):
        r = await rig.chat(rig.keys[0], stream=True)
    frames = sse_frames(r.text)
    assert frames[-1] == "[DONE]"
    assert json.loads(frames[-2])["error"]["type"] == "upstream_error"
