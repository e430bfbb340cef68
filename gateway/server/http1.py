"""A lean HTTP/1.1 (+ WebSocket) ASGI server for the gateway, on Trio: the accept loop and one
task per connection.

Why (docs/decisions.md, "HTTP/1.1 upstream client and server"): on this machine Hypercorn's
h11 path costs about 1.6 ms of CPU per request before the app runs. This server does only what
the gateway needs: keep-alive, pipelining (a pipelined request runs after the previous response
was sent), Content-Length and chunked request bodies, `Expect: 100-continue`, responses written
in as few sends as possible (head and first body part together), streaming with chunked
encoding, `http.disconnect` when the client leaves, WebSocket (gateway/server/websocket.py),
lifespan, and graceful drain. No h2, no TLS: `[server] http_server = "hypercorn"` serves those.

It faces the internet, so: framing is decided by llhttp (protocol/http1_server.py), never by
hand; a malformed request gets a 4xx in the OpenAI error shape and the connection is closed;
heads, bodies and idle connections have timeouts and limits (`[server]`, docs/operations.md);
past `max_connections` new connections wait in the kernel's backlog; and a failure in one
connection (ours or the app's) is logged and ends that connection only.

Cancellation: cancelling `Http1Server.serve` closes every connection at once; the drain path
(shutdown trigger) stops accepting, closes idle connections, and lets in-flight requests run
for the grace period before cancelling them.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes

import msgspec
import trio

from gateway.config.schema import ServerConfig
from gateway.errors import ClientDisconnected, HandshakeError
from gateway.server.asgi import ASGIApp, Message
from gateway.server.connection import REASONS, Connection, Exchange
from gateway.server.idle import IdleWatch
from gateway.server.websocket import serve_websocket
from protocol.http1_server import END, Event, Reject, Request, RequestParser, Upgrade

log = logging.getLogger("gateway.http")
_CODES = {
    400: "bad_request",
    408: "request_timeout",
    431: "request_header_fields_too_large",
    505: "http_version_not_supported",
}
# accept() failing for want of file descriptors or memory: wait and retry, as trio does.
_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}


@dataclass(frozen=True)
class ServerStatistics:
    connections: int  # open client connections
    idle: int  # of which waiting for a next request
    free_slots: int  # connections that may still be accepted (max_connections)
    draining: bool


class Http1Server:
    def __init__(self, app: ASGIApp, config: ServerConfig) -> None:
        self._app = app
        self._keep_alive_timeout = config.keep_alive_timeout_s
        self._max_requests = config.keep_alive_max_requests
        self._graceful_timeout = config.graceful_timeout_s
        self._head_timeout = config.request_head_timeout_s
        self._body_timeout = config.request_body_timeout_s
        self._max_head = config.max_head_bytes
        self._max_headers = config.max_headers
        self._slots = trio.Semaphore(config.max_connections)
        self._websocket_max_message = config.websocket_max_message_bytes
        self.draining = trio.Event()
        self._idle = IdleWatch(min(self._keep_alive_timeout, self._head_timeout))
        self.connections = 0

    def statistics(self) -> ServerStatistics:
        return ServerStatistics(
            self.connections, len(self._idle), self._slots.value, self.draining.is_set()
        )

    def __repr__(self) -> str:
        return f"<Http1Server {self.statistics()}>"

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
            lifespan_nursery.start_soon(self._idle.run)
            async with trio.open_nursery() as connections:
                try:
                    async with trio.open_nursery() as accepting:
                        for listener in listeners:
                            accepting.start_soon(self._accept, listener, connections)
                        task_status.started([_url(listener) for listener in listeners])
                        await shutdown_trigger()
                        accepting.cancel_scope.cancel()
                finally:  # also when cancelled from outside: no listening socket left open
                    with trio.CancelScope(shield=True):
                        for listener in listeners:
                            await listener.aclose()
                self.draining.set()
                self._idle.cancel_all()
                connections.cancel_scope.deadline = trio.current_time() + self._graceful_timeout
            await lifespan.shutdown()
            lifespan_nursery.cancel_scope.cancel()

    async def _accept(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        """Accept while a connection slot is free: past `max_connections`, new connections wait
        in the kernel's backlog and the open ones are served."""
        while True:
            await self._slots.acquire()
            try:
                stream = await listener.accept()
            except OSError as exc:
                self._slots.release()
                if exc.errno not in _CAPACITY_ERRNOS:
                    raise
                log.error("accept failed (%s): retrying in 0.1 s", exc)
                await trio.sleep(0.1)
                continue
            except BaseException:
                self._slots.release()
                raise
            nursery.start_soon(self._handle, stream)

    async def _handle(self, stream: trio.SocketStream) -> None:
        """One connection. Whatever fails in it ends it alone (cancellation still passes)."""
        self.connections += 1
        parser = RequestParser(max_head_bytes=self._max_head, max_headers=self._max_headers)
        conn = Connection(stream, parser, self.draining)
        try:
            with trio.CancelScope() as scope:  # cancelled by `_idle` only (gateway/server/idle.py)
                await self._serve_connection(conn, scope)
        except Exception:
            log.exception("connection failed; closing it")
        finally:
            self.connections -= 1
            self._slots.release()
            await trio.aclose_forcefully(stream)

    async def _serve_connection(self, conn: Connection, scope: trio.CancelScope) -> None:
        scope_base = _scope_base(conn.stream)
        served = 0
        while not self.draining.is_set() and served < self._max_requests:
            head = await self._next_head(conn, served, scope)
            if head is None:
                return
            if isinstance(head, Reject):
                await _reject(conn, head)
                return
            served += 1
            if head.websocket:
                await self._websocket(conn, head, scope_base)
                return
            broken = _broken_body(conn)
            if broken is not None:
                await _reject(conn, broken)
                return
            exchange = Exchange(conn, head, self._body_timeout)
            if served == self._max_requests:
                exchange.keep_alive = False  # the answer says so: the client will not retry
            await self._run_app(exchange, head, scope_base)
            if exchange.finished and not exchange.request_done:
                await exchange.discard_body()
            if not (exchange.finished and exchange.keep_alive and exchange.request_done):
                if exchange.finished and not exchange.client_gone:
                    await conn.linger()
                return

    async def _next_head(
        self, conn: Connection, served: int, scope: trio.CancelScope
    ) -> Request | Reject | None:
        """The next request's head (`Request`), a `Reject` (malformed, too large, or slower
        than the head timeout: 408), or None when the client closed, stayed idle past the
        keep-alive timeout (a new connection that sends nothing: the head timeout), or the
        server drains while it is idle (a request that has begun arriving is not cut by
        draining). The idle wait's timeout cancels the connection's `scope` (gateway/server/
        idle.py), which ends the connection."""
        event = conn.next_event()
        if event is not None:
            return _head(event)
        self._idle.wait(scope, self._keep_alive_timeout if served else self._head_timeout)
        try:
            filled = await conn.fill()
        finally:
            cancelled = self._idle.done(scope)
        if cancelled or not filled:
            return None
        event = conn.next_event()
        if event is not None:  # the usual case: the whole head came in one read
            return _head(event)
        with trio.move_on_after(self._head_timeout) as slow:
            event = await conn.event()
        if slow.cancelled_caught:
            return Reject(408, "The request head did not arrive in time.")
        return _head(event)

    async def _websocket(self, conn: Connection, head: Request, base: dict[str, Any]) -> None:
        events = conn.parser.events
        events.popleft()  # END: an upgrade request has no body
        upgrade = events.popleft()
        assert type(upgrade) is Upgrade
        try:
            await serve_websocket(
                self._app,
                conn,
                head,
                upgrade.rest,
                _scope(head, base),
                max_message_bytes=self._websocket_max_message,
            )
        except HandshakeError as exc:
            await _reject(conn, Reject(400, f"Bad WebSocket handshake: {exc}"))

    async def _run_app(self, exchange: Exchange, head: Request, base: dict[str, Any]) -> None:
        scope = _scope(head, base)
        try:
            await self._app(scope, exchange.receive, exchange.send)
        except ClientDisconnected:
            return
        except Exception:
            # The path as sent (%-escapes kept): decoded, `%0D%0A` would forge log lines.
            log.exception("unhandled error in the app on %s %r", head.method, scope["raw_path"])
        if exchange.started:
            return
        if exchange.error is not None:  # a client that half-closed mid-body can still read
            exchange.keep_alive = False
            if not exchange.conn.broken:
                await _reject(exchange.conn, exchange.error)
            exchange.finished = True
            return
        if exchange.client_gone:
            return
        exchange.keep_alive = False
        try:
            await exchange.send({"type": "http.response.start", "status": 500, "headers": []})
            await exchange.send({"type": "http.response.body", "body": b""})
        except ClientDisconnected:
            pass


def _scope(head: Request, base: dict[str, Any]) -> dict[str, Any]:
    target = head.target
    if not target.startswith(b"/"):
        target = _origin_form(target)
    raw_path, _, query = target.partition(b"?")
    return {
        **base,
        "http_version": head.http_version,
        "method": head.method,
        "path": unquote_to_bytes(raw_path).decode("utf-8", "replace"),
        "raw_path": raw_path,
        "query_string": query,
        "headers": head.headers,
    }


def _head(event: Event | None) -> Request | Reject | None:
    """Where a head is due: a Request or Reject; anything else (an Upgrade after a WebSocket
    request served as plain HTTP) ends the connection."""
    return event if isinstance(event, Request | Reject) else None


def _broken_body(conn: Connection) -> Reject | None:
    """The refusal, if the body after the head just taken already broke framing (in the same
    read): then the answer is 400 whatever the app would have said."""
    events = conn.parser.events
    if events and type(events[-1]) is Reject and END not in events:
        return events[-1]
    return None


def _origin_form(target: bytes) -> bytes:
    """The path and query of an absolute-form target (RFC 9112 3.2.2: a server must accept
    it); other forms (`*`, authority) are passed on as they are, for the app to refuse."""
    scheme, sep, rest = target.partition(b"://")
    if not sep or not scheme.isalpha():
        return target
    slash = rest.find(b"/")
    query = rest.find(b"?")
    if slash < 0 or 0 <= query < slash:
        return b"/" + rest[query:] if query >= 0 else b"/"
    return rest[slash:]


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


async def _reject(conn: Connection, reject: Reject) -> None:
    """Answer a request we will not serve in the OpenAI error shape, then close."""
    status = reject.status
    error = {
        "message": reject.reason,
        "type": "invalid_request_error",
        "param": None,
        "code": _CODES.get(status, "bad_request"),
    }
    body = msgspec.json.encode({"error": error})
    head = b"HTTP/1.1 %d %s\r\n" % (status, REASONS[status])
    with trio.move_on_after(1):  # a client that does not read gets no more of our time
        try:
            await conn.write(
                head + b"content-type: application/json\r\ncontent-length: %d\r\n"
                b"connection: close\r\n\r\n%s" % (len(body), body)
            )
        except ClientDisconnected:
            return
    await conn.linger()


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
