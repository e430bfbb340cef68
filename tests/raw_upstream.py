"""A fake upstream that answers with crafted bytes: a Trio TCP listener that reads each request
(head and Content-Length body) and plays the next reply of its script on that connection.

A reply is a list of steps: bytes are written as they are (one send each), a `Lazy` is
written block by block, a float sleeps that many seconds, `CLOSE` closes the connection, `HANG`
waits until the test ends. The replies are taken in order across connections; past the end of
the script every request gets `OK`.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial

import trio

CLOSE = object()
HANG = object()
CORK = object()  # TLS only: hold what follows (each send still its own record) ...
UNCORK = object()  # ... and write it to the socket in one go (one TCP segment, usually)


class _Corked(trio.abc.Stream):
    """A TCP stream under the server's TLS layer that can hold writes back."""

    def __init__(self, inner: trio.SocketStream) -> None:
        self.inner = inner
        self.held: bytearray | None = None

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.held is None:
            await self.inner.send_all(data)
        else:
            self.held += data

    async def uncork(self) -> None:
        held, self.held = self.held, None
        if held:
            await self.inner.send_all(bytes(held))

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Lazy:
    """Bytes made while they are sent (a huge body never sits in memory)."""

    blocks: Callable[[], Iterator[bytes]]


Step = bytes | float | object
Reply = list[Step]


def ok(body: bytes = b'{"ok":true}', extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        + b"Content-Length: %d\r\n" % len(body)
        + extra
        + b"\r\n"
        + body
    )


OK = [ok()]


def chunked(*parts: bytes, head: bytes = b"HTTP/1.1 200 OK\r\n") -> bytes:
    framed = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts)
    return head + b"Transfer-Encoding: chunked\r\n\r\n" + framed + b"0\r\n\r\n"


@dataclass
class RawUpstream:
    url: str = ""
    script: list[Reply] = field(default_factory=list)
    requests: list[bytes] = field(default_factory=list)  # request bodies, in arrival order
    connections: int = 0

    def play(self, *replies: Reply) -> None:
        self.script.extend(replies)


async def _read_request(stream: trio.abc.Stream, buffer: bytearray) -> bytes | None:
    """One request's body (b"" if none); None when the client closed first."""
    while (end := buffer.find(b"\r\n\r\n")) < 0:
        data = await stream.receive_some(65536)
        if not data:
            return None
        buffer += data
    head = bytes(buffer[:end]).lower()
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name == b"content-length":
            length = int(value)
    del buffer[: end + 4]
    while len(buffer) < length:
        data = await stream.receive_some(65536)
        if not data:
            return None
        buffer += data
    body = bytes(buffer[:length])
    del buffer[:length]
    return body


async def _serve(server: RawUpstream, tls: ssl.SSLContext | None, tcp: trio.SocketStream) -> None:
    server.connections += 1
    buffer = bytearray()
    stream: trio.abc.Stream = tcp
    corked = _Corked(tcp)
    try:
        if tls is not None:
            stream = trio.SSLStream(corked, tls, server_side=True)
        while (body := await _read_request(stream, buffer)) is not None:
            server.requests.append(body)
            reply = server.script.pop(0) if server.script else OK
            for step in reply:
                if step is CLOSE:
                    return
                if step is HANG:
                    await trio.sleep_forever()
                if step is CORK:
                    corked.held = bytearray()
                elif step is UNCORK:
                    await corked.uncork()
                if isinstance(step, float):
                    await trio.sleep(step)
                elif isinstance(step, bytes):
                    await stream.send_all(step)
                elif isinstance(step, Lazy):
                    for block in step.blocks():
                        await stream.send_all(block)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass  # the client gave up on a reply: what it is for
    finally:
        await trio.aclose_forcefully(stream)


async def serve_raw_upstream(
    *, tls: ssl.SSLContext | None = None, task_status: trio.TaskStatus[RawUpstream]
) -> None:
    """Serve until cancelled; with `tls`, over TLS (https://127.0.0.1:port)."""
    server = RawUpstream()
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    server.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    async with trio.open_nursery() as nursery:
        handler = partial(_serve, server, tls)
        nursery.start_soon(partial(trio.serve_listeners, handler, listeners))
        task_status.started(server)


def repeated(block: bytes, total: int) -> Iterator[bytes]:
    """`total` bytes as `block`s, without holding them all."""
    for _ in range(total // len(block)):
        yield block


def completion(content: object) -> bytes:
    """A `chat.completion` body answering `content` (any JSON value, to test hostile ones)."""
    return json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "r",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    ).encode()
