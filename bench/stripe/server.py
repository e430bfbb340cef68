"""The simulated Stripe's HTTP/1.1 server: sockets, connections, outages.

Requests are read with the simulated upstream's reader (bench/upstream/http.py: keep-alive,
pipelining, body limits) and answered in order on each connection by the StripeSim (sim.py).
`outage` applies to every API request once it was read: "refuse" resets the connection
(SO_LINGER 0) without a word, "500" answers api_error, "hang" never answers (the connection is
held until the client leaves). `/_sim/...` control requests are answered during outages.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial

import trio

from bench.stripe.sim import LoggedRequest, StripeSim, encode
from bench.stripe.webhooks import (
    DEFAULT_ATTEMPT_TIMEOUT_S,
    DEFAULT_RETRY_SCHEDULE_S,
    WebhookSender,
)
from bench.upstream.http import CONTINUE, HttpError, Request, RequestReader, json_response

log = logging.getLogger(__name__)

RECEIVE_SIZE = 65536
_LINGER_ZERO = struct.pack("ii", 1, 0)


async def _serve_connection(sim: StripeSim, stream: trio.SocketStream) -> None:
    try:
        await _Connection(sim, stream).serve()
    except Exception:
        # A bug met while serving one connection ends that connection, never the server.
        log.exception("simulated stripe: a connection failed")


class _Connection:
    def __init__(self, sim: StripeSim, stream: trio.SocketStream) -> None:
        self._sim = sim
        self._stream = stream
        self._reader = RequestReader()

    async def serve(self) -> None:
        try:
            await self._serve_requests()
        except HttpError as exc:
            body = encode({"error": {"type": "invalid_request_error", "message": exc.message}})
            try:
                await self._stream.send_all(json_response(exc.status, body, close=True))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(self._stream)

    async def _serve_requests(self) -> None:
        reader = self._reader
        while True:
            request = reader.next_request()
            while request is None:
                if reader.take_continue():
                    await self._stream.send_all(CONTINUE)
                data = await self._stream.receive_some(RECEIVE_SIZE)
                if not data:
                    return
                reader.feed(data)
                request = reader.next_request()
            if not await self._answer(request) or not request.keep_alive:
                return

    async def _answer(self, request: Request) -> bool:
        sim = self._sim
        outage = sim.outage
        if outage is not None and not request.target.startswith("/_sim/"):
            path = request.target.partition("?")[0]
            key = request.headers.get("idempotency-key")
            sim._log(LoggedRequest(request.method, path, key, {}, None))
            if outage == "refuse":
                sim.counters.outage_refused += 1
                self._reset()
                return False
            if outage == "hang":
                sim.counters.outage_hung += 1
                await self._until_peer_leaves()
                return False
            sim.counters.outage_500 += 1
            body = encode({"error": {"type": "api_error", "message": "An unknown error occurred"}})
            await self._stream.send_all(json_response(500, body, close=not request.keep_alive))
            return True
        answer = sim.answer(request)
        if answer is None:
            await self._until_peer_leaves()
            return False
        status, body, headers = answer
        await self._stream.send_all(
            json_response(status, body, headers=headers, close=not request.keep_alive)
        )
        return True

    def _reset(self) -> None:
        try:
            self._stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_ZERO)
        except OSError:
            pass

    async def _until_peer_leaves(self) -> None:
        try:
            while await self._stream.receive_some(RECEIVE_SIZE):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def serve_stripe(
    *,
    secret_key: str,
    host: str = "127.0.0.1",
    port: int = 0,
    webhook_url: str | None = None,
    webhook_secret: str | None = None,
    retry_schedule_s: Sequence[float] = DEFAULT_RETRY_SCHEDULE_S,
    attempt_timeout_s: float = DEFAULT_ATTEMPT_TIMEOUT_S,
    now: Callable[[], float] = time.time,
    task_status: trio.TaskStatus[StripeSim] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; `task_status.started` hands over the StripeSim once listening.
    `now` gives `created` fields and webhook signature timestamps (unix seconds)."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound_host, bound_port = listeners[0].socket.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    sender = WebhookSender(webhook_url, webhook_secret, now, retry_schedule_s, attempt_timeout_s)
    sim = StripeSim(f"http://{shown}:{bound_port}", secret_key, sender, now)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender.run)
        task_status.started(sim)
        await trio.serve_listeners(partial(_serve_connection, sim), listeners)


@asynccontextmanager
async def running_stripe_sim(
    *,
    secret_key: str,
    webhook_url: str | None = None,
    webhook_secret: str | None = None,
    retry_schedule_s: Sequence[float] = DEFAULT_RETRY_SCHEDULE_S,
    attempt_timeout_s: float = DEFAULT_ATTEMPT_TIMEOUT_S,
    now: Callable[[], float] = time.time,
) -> AsyncIterator[StripeSim]:
    """`serve_stripe` on a free loopback port for the body of the `async with`."""
    async with trio.open_nursery() as nursery:
        sim: StripeSim = await nursery.start(
            lambda task_status: serve_stripe(
                secret_key=secret_key,
                webhook_url=webhook_url,
                webhook_secret=webhook_secret,
                retry_schedule_s=retry_schedule_s,
                attempt_timeout_s=attempt_timeout_s,
                now=now,
                task_status=task_status,
            )
        )
        try:
            yield sim
        finally:
            nursery.cancel_scope.cancel()
