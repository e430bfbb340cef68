"""A stand-in OTLP/HTTP collector for `bench tracing`: accepts `POST /v1/traces` on loopback
and answers 200 with an empty `ExportTraceServiceResponse` (zero bytes), counting requests and
bytes. It decodes nothing: the bench measures what exporting costs the gateway, not a
collector."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import trio

_OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n"
_MAX_HEAD = 64 * 1024


@dataclass
class OtlpSink:
    url: str = ""
    requests: int = 0
    bytes: int = 0


async def _serve(sink: OtlpSink, stream: trio.SocketStream) -> None:
    buffer = bytearray()
    try:
        while True:
            while (end := buffer.find(b"\r\n\r\n")) < 0:
                if len(buffer) > _MAX_HEAD:
                    return
                data = await stream.receive_some(65536)
                if not data:
                    return
                buffer += data
            head = bytes(buffer[:end]).decode("latin-1").lower()
            del buffer[: end + 4]
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip() == "content-length":
                    length = int(value.strip())
            while len(buffer) < length:
                data = await stream.receive_some(65536)
                if not data:
                    return
                buffer += data
            del buffer[:length]
            sink.requests += 1
            sink.bytes += length
            await stream.send_all(_OK)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ValueError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


async def serve_otlp_sink(*, task_status: trio.TaskStatus[OtlpSink]) -> None:
    """Serve on 127.0.0.1 until cancelled; `url` is the collector's base URL."""
    sink = OtlpSink()
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    sink.url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(trio.serve_listeners, partial(_serve, sink), listeners))
        task_status.started(sink)
