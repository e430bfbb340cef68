"""A webhook receiver for tests: an in-process Trio HTTPS (or HTTP) server on loopback that
records every request exactly as it arrived and answers from a script.

TLS uses a throwaway CA from `trustme`: `tls.server` serves a certificate for 127.0.0.1, ::1 and
localhost; `tls.client()` is an `ssl.SSLContext` trusting that CA (give it to the sender).
Each arrival keeps the raw head and body bytes, the parsed headers and the Trio time it was
read (`trio.current_time()`, so MockClock tests can check the retry schedule to the second).

A reply is raw bytes (written as they are), `HANG` (never answer), `CLOSE` (close without a
word) or a `Stream` (bytes produced as they are sent: an endless body, pauses, or a gate the
test opens). Replies are taken in
order; past the end of the script every request gets `default` (200 OK).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

import trio
import trustme

HANG = object()
CLOSE = object()
_MAX_HEAD = 64 * 1024


@dataclass
class Stream:
    """Bytes produced while they are sent."""

    # A float: sleep that many seconds; an Event: wait until the test sets it.
    blocks: Callable[[], Iterator[bytes | float | trio.Event]]
    close: bool = False  # close the connection after the last block


Reply = bytes | Stream | object


def response(status: int, body: bytes = b"", extra: str = "") -> bytes:
    """A complete response with a Content-Length body; `extra`: more header lines (CRLF ends)."""
    return (
        f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode("latin-1")
        + body
    )


OK = response(200, b"ok")


@dataclass(frozen=True)
class ReceiverTLS:
    ca_pem: bytes
    server: ssl.SSLContext

    def client(self) -> ssl.SSLContext:
        """A client context that trusts this CA only (and verifies names as usual)."""
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode("ascii"))
        return ctx


def make_tls(*names: str) -> ReceiverTLS:
    """A fresh trustme CA and a server context for `names` (default: loopback and localhost)."""
    ca = trustme.CA()
    cert = ca.issue_cert(*(names or ("127.0.0.1", "::1", "localhost")))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server)
    return ReceiverTLS(ca.cert_pem.bytes(), server)


@dataclass(frozen=True)
class Arrival:
    at: float  # Trio time the whole request had been read
    method: str
    target: str
    headers: list[tuple[str, str]]  # as sent, in order
    head: bytes  # raw, up to and including the blank line
    body: bytes

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k.lower() == name.lower()]
        assert len(values) <= 1, f"{name} sent {len(values)} times"
        return values[0] if values else None


@dataclass
class Receiver:
    url: str = ""
    port: int = 0
    script: list[Reply] = field(default_factory=list)
    default: Reply = OK
    arrivals: list[Arrival] = field(default_factory=list)
    connections: int = 0
    _waiters: list[tuple[int, trio.Event]] = field(default_factory=list)

    def play(self, *replies: Reply) -> None:
        self.script.extend(replies)

    async def wait_for(self, count: int) -> list[Arrival]:
        """Until `count` requests have arrived (no deadline: MockClock tests jump to none)."""
        if len(self.arrivals) < count:
            event = trio.Event()
            self._waiters.append((count, event))
            await event.wait()
        return self.arrivals[:count]

    def _arrived(self, arrival: Arrival) -> None:
        self.arrivals.append(arrival)
        for count, event in list(self._waiters):
            if len(self.arrivals) >= count:
                event.set()
                self._waiters.remove((count, event))


async def _read_request(stream: trio.abc.Stream, buffer: bytearray) -> Arrival | None:
    while (end := buffer.find(b"\r\n\r\n")) < 0:
        if len(buffer) > _MAX_HEAD:
            return None
        data = await stream.receive_some(65536)
        if not data:
            return None
        buffer += data
    head = bytes(buffer[: end + 4])
    del buffer[: end + 4]
    lines = head[:-4].decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append((name, value.strip()))
    length = sum(int(v) for k, v in headers if k.lower() == "content-length")
    while len(buffer) < length:
        data = await stream.receive_some(65536)
        if not data:
            return None
        buffer += data
    body = bytes(buffer[:length])
    del buffer[:length]
    return Arrival(trio.current_time(), method, target, headers, head, body)


async def _serve(receiver: Receiver, tls: ssl.SSLContext | None, tcp: trio.SocketStream) -> None:
    receiver.connections += 1
    stream: trio.abc.Stream = tcp
    buffer = bytearray()
    try:
        if tls is not None:
            stream = trio.SSLStream(tcp, tls, server_side=True)
        while (arrival := await _read_request(stream, buffer)) is not None:
            receiver._arrived(arrival)
            reply = receiver.script.pop(0) if receiver.script else receiver.default
            if reply is HANG:
                await trio.sleep_forever()
            if reply is CLOSE:
                return
            if isinstance(reply, Stream):
                for block in reply.blocks():
                    if isinstance(block, float):
                        await trio.sleep(block)
                    elif isinstance(block, trio.Event):
                        await block.wait()
                    else:
                        await stream.send_all(block)
                if reply.close:
                    return
            elif isinstance(reply, bytes):
                await stream.send_all(reply)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass  # the client gave up, or (TLS) did not trust us
    finally:
        await trio.aclose_forcefully(stream)


async def serve_receiver(
    *,
    tls: ssl.SSLContext | None,
    host: str = "127.0.0.1",
    task_status: trio.TaskStatus[Receiver],
) -> None:
    """Serve until cancelled; `url` is https://127.0.0.1:<port>/hook (http without `tls`)."""
    receiver = Receiver()
    listeners = await trio.open_tcp_listeners(0, host=host)
    receiver.port = listeners[0].socket.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    receiver.url = f"{'https' if tls else 'http'}://{shown}:{receiver.port}/hook"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(trio.serve_listeners, partial(_serve, receiver, tls), listeners))
        task_status.started(receiver)


def endless(block: bytes = b"x" * 16384) -> Iterator[bytes | float | trio.Event]:
    while True:
        yield block
