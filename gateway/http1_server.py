"""A lean HTTP/1.1 ASGI server for the gateway, on Trio.

Why (docs/decisions.md, "HTTP/1.1 upstream client and server"): on this machine Hypercorn's
h11 path costs about 1.6 ms of CPU per request before the app runs — a bare ASGI app behind it
tops out near 600 req/s on one core, below the gateway's own targets. This server does only
what the gateway needs: keep-alive, Content-Length and chunked request bodies,
`Expect: 100-continue`, responses written in as few sends as possible (head and first body
part together), streaming with chunked encoding, `http.disconnect` when the client leaves,
lifespan, and graceful drain. No pipelining (a pipelined request is read after the current
response), no h2, no TLS: `[server] http_server = "hypercorn"` serves those.

Cancellation: cancelling `Http1Server.serve` closes every connection at once; the drain path
(shutdown trigger) stops accepting, closes idle connections, and lets in-flight requests run
for the grace period before cancelling them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any
from urllib.parse import unquote_to_bytes

import trio

from gateway.http1_connection import REASONS, ClientGone, Connection, Exchange
from gateway.middleware import ASGIApp, Message
from protocol.http1 import (
    HTTPProtocolError,
    RequestHead,
    parse_request_head,
    request_body_reader,
)

log = logging.getLogger("gateway.http")
_BAD_REQUEST_BODY = (
    b'{"error":{"message":"Malformed HTTP request.","type":"invalid_request_error",'
    b'"param":null,"code":"bad_request"}}'
)


class Http1Server:
    def __init__(
        self,
        app: ASGIApp,
        *,
        keep_alive_timeout_s: float,
        keep_alive_max_requests: int,
        graceful_timeout_s: float,
    ) -> None:
        self._app = app
        self._keep_alive_timeout = keep_alive_timeout_s
        self._max_requests = keep_alive_max_requests
        self._graceful_timeout = graceful_timeout_s
        self.draining = trio.Event()
        self._idle: set[trio.CancelScope] = set()
        self.connections = 0

    async def serve(
        self,
        listeners: list[trio.SocketListener],
        shutdown_trigger: Callable[[], Awaitable[None]],
        *,
        task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve until `shutdown_trigger` returns, then drain (see module docstring)."""
        async with trio.open_nursery() as lifespan_nursery:
            lifespan = _Lifespan(self._app)
            await lifespan_nursery.start(lifespan.run)
            async with trio.open_nursery() as connections:
                async with trio.open_nursery() as accepting:
                    accepting.start_soon(
                        partial(
                            trio.serve_listeners,
                            self._handle,
                            listeners,
                            handler_nursery=connections,
                        )
                    )
                    task_status.started([_url(listener) for listener in listeners])
                    await shutdown_trigger()
                    accepting.cancel_scope.cancel()
                for listener in listeners:
                    await listener.aclose()
                self.draining.set()
                for scope in list(self._idle):
                    scope.cancel()
                connections.cancel_scope.deadline = trio.current_time() + self._graceful_timeout
            await lifespan.shutdown()
            lifespan_nursery.cancel_scope.cancel()

    async def _handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        conn = Connection(stream, self.draining)
        try:
            await self._serve_connection(conn)
        finally:
            self.connections -= 1
            await trio.aclose_forcefully(stream)

    async def _serve_connection(self, conn: Connection) -> None:
        scope_base = _scope_base(conn.stream)
        served = 0
        while not self.draining.is_set() and served < self._max_requests:
            try:
                request = await self._read_head(conn)
            except HTTPProtocolError as exc:
                await _reject(conn, 431 if "large" in str(exc) else 400)
                return
            if request is None:
                return
            head, leftover = request
            served += 1
            exchange = Exchange(conn, head, request_body_reader(head), leftover)
            await self._run_app(exchange, head, scope_base)
            if exchange.finished and not exchange.request_done:
                await exchange.discard_body()
            if not (exchange.finished and exchange.keep_alive and exchange.request_done):
                if exchange.finished and not exchange.client_gone:
                    await conn.linger()
                return

    async def _read_head(self, conn: Connection) -> tuple[RequestHead, bytes] | None:
        """The next request's head and the bytes after it; None when the client closed, or
        stayed idle past the keep-alive timeout, or the server drains while it is idle (a
        request that has begun arriving is not cut by draining)."""
        data = bytearray(conn.buffer)
        conn.buffer = b""
        with trio.move_on_after(self._keep_alive_timeout) as idle:
            self._idle.add(idle)
            try:
                while (parsed := parse_request_head(data)) is None:
                    chunk = await conn.read_more()
                    if not chunk:
                        return None
                    data += chunk
                    self._idle.discard(idle)
            finally:
                self._idle.discard(idle)
            head, offset = parsed
            return head, bytes(data[offset:])
        return None

    async def _run_app(self, exchange: Exchange, head: RequestHead, base: dict[str, Any]) -> None:
        raw_path, _, query = head.target.partition(b"?")
        scope = {
            **base,
            "http_version": head.http_version,
            "method": head.method,
            "path": unquote_to_bytes(raw_path).decode("utf-8", "replace"),
            "raw_path": raw_path,
            "query_string": query,
            "headers": head.headers,
        }
        try:
            await self._app(scope, exchange.receive, exchange.send)
        except ClientGone:
            return
        except Exception:
            log.exception("unhandled error in the app on %s %s", head.method, scope["path"])
        if not exchange.started and not exchange.client_gone:
            exchange.keep_alive = False
            try:
                await exchange.send({"type": "http.response.start", "status": 500, "headers": []})
                await exchange.send({"type": "http.response.body", "body": b""})
            except ClientGone:
                pass


def _scope_base(stream: trio.SocketStream) -> dict[str, Any]:
    try:
        client = stream.socket.getpeername()[:2]
        server = stream.socket.getsockname()[:2]
    except OSError:
        client = server = None
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "scheme": "http",
        "root_path": "",
        "client": client,
        "server": server,
        "extensions": {},
    }


async def _reject(conn: Connection, status: int) -> None:
    head = b"HTTP/1.1 %d %s\r\n" % (status, REASONS[status])
    try:
        await conn.write(
            head + b"content-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (len(_BAD_REQUEST_BODY), _BAD_REQUEST_BODY)
        )
    except ClientGone:
        pass


def _url(listener: trio.SocketListener) -> str:
    host, port = listener.socket.getsockname()[:2]
    return f"http://{host}:{port}"


class _Lifespan:
    """The ASGI lifespan protocol, so the app's startup and shutdown hooks run."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._to_app, self._app_inbox = trio.open_memory_channel[Message](2)
        self._started = trio.Event()
        self._stopped = trio.Event()
        self._supported = True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._call_app)
            await self._to_app.send({"type": "lifespan.startup"})
            await self._started.wait()
            task_status.started()

    async def _call_app(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}}
        try:
            await self._app(scope, self._app_inbox.receive, self._from_app)
        except Exception:
            log.debug("the app does not support lifespan", exc_info=True)
            self._supported = False
        self._started.set()
        self._stopped.set()

    async def _from_app(self, message: Message) -> None:
        kind = message["type"]
        if kind.startswith("lifespan.startup"):
            if kind.endswith("failed"):
                raise RuntimeError(f"app startup failed: {message.get('message', '')}")
            self._started.set()
        elif kind.startswith("lifespan.shutdown"):
            self._stopped.set()

    async def shutdown(self) -> None:
        if self._supported and not self._stopped.is_set():
            await self._to_app.send({"type": "lifespan.shutdown"})
            with trio.move_on_after(10):
                await self._stopped.wait()
