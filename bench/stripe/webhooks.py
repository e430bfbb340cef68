"""Webhook deliveries as Stripe makes them: each event POSTed as JSON to the endpoint with a
`Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>` header,
retried with a backoff on a non-2xx answer, a connection error or a timeout.

One task delivers events in the order they were emitted; an event being retried holds back the
ones after it (Stripe promises no order; this keeps tests deterministic). After the last
attempt an event is dropped (`redeliver` sends it again). While `paused`, or while no URL is
set, events wait in the queue. Every attempt is recorded in `deliveries`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import trio

DEFAULT_RETRY_SCHEDULE_S = (0.5, 1.0, 2.0, 4.0)  # waits between attempts: 5 attempts in all
DEFAULT_ATTEMPT_TIMEOUT_S = 10.0


def sign(payload: bytes, secret: str, timestamp: int) -> str:
    """The `Stripe-Signature` header value for `payload` signed with `secret` at `timestamp`."""
    signed = str(timestamp).encode() + b"." + payload
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def encode_event(event: dict[str, Any]) -> bytes:
    return json.dumps(event, indent=2).encode()  # Stripe's bodies are pretty-printed


@dataclass(frozen=True, slots=True)
class Delivery:
    event_id: str
    event_type: str
    attempt: int  # 1 for the first try of this sending
    status: int | None  # the receiver's answer, None when there was none
    error: str | None  # why there was no answer (connect error, timeout)
    at: float  # trio.current_time() when the attempt ended


class _Body(httpx.AsyncByteStream):
    """The event's bytes in one chunk, from a plain iterator: httpx's own is an async
    generator, which a delivery cut short (its timeout, the receiver resetting, the sim
    stopping) leaves unfinished, and Trio reports it when collected."""

    def __init__(self, body: bytes) -> None:
        self._left = [body]

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        if not self._left:
            raise StopAsyncIteration
        return self._left.pop()


class WebhookSender:
    """The queue and the delivery loop (run `run` in a nursery)."""

    def __init__(
        self,
        url: str | None,
        secret: str | None,
        now: Callable[[], float],
        retry_schedule_s: Sequence[float] = DEFAULT_RETRY_SCHEDULE_S,
        attempt_timeout_s: float = DEFAULT_ATTEMPT_TIMEOUT_S,
    ) -> None:
        self.url = url
        self.secret = secret
        self.retry_schedule_s = tuple(retry_schedule_s)
        self.attempt_timeout_s = attempt_timeout_s
        self.deliveries: list[Delivery] = []
        self.delivered: set[str] = set()  # event ids answered 2xx at least once
        self.dropped: list[str] = []  # event ids whose every attempt failed
        self._now = now
        self._queue: deque[dict[str, Any]] = deque()
        self._paused = False
        self._wake = trio.Event()
        self._idle = trio.Event()
        self._idle.set()

    @property
    def paused(self) -> bool:
        return self._paused

    @paused.setter
    def paused(self, value: bool) -> None:
        self._paused = value
        self._wake.set()

    def configure(self, url: str | None, secret: str | None) -> None:
        self.url, self.secret = url, secret
        self._wake.set()

    def enqueue(self, event: dict[str, Any]) -> None:
        self._queue.append(event)
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._queue)

    async def wait_idle(self) -> None:
        """Until every queued event was delivered or dropped (never while paused)."""
        await trio.lowlevel.checkpoint()
        while self._queue or not self._idle.is_set():
            await self._idle.wait()

    async def run(self) -> None:
        async with httpx.AsyncClient() as client:
            while True:
                while not self._queue or self._paused or not self.url or not self.secret:
                    if not self._queue:
                        self._idle.set()
                    self._wake = trio.Event()
                    await self._wake.wait()
                event = self._queue[0]
                await self._deliver(client, event)
                self._queue.popleft()
                if not self._queue:
                    self._idle.set()

    async def _deliver(self, client: httpx.AsyncClient, event: dict[str, Any]) -> None:
        body = encode_event(event)
        attempts = len(self.retry_schedule_s) + 1
        for attempt in range(1, attempts + 1):
            while self._paused or not self.url or not self.secret:
                self._wake = trio.Event()
                await self._wake.wait()
            url, secret = self.url, self.secret
            headers = {
                "content-type": "application/json; charset=utf-8",
                "user-agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
                "stripe-signature": sign(body, secret, int(self._now())),
                "cache-control": "no-cache",
                "accept": "*/*; q=0.5, application/xml",
            }
            status: int | None = None
            error: str | None = None
            with trio.move_on_after(self.attempt_timeout_s) as scope:
                try:
                    request = client.build_request(
                        "POST", url, headers=headers, content=body, timeout=None
                    )
                    request.stream = _Body(body)
                    response = await client.send(request)
                    status = response.status_code
                except httpx.HTTPError as exc:
                    error = type(exc).__name__
            if scope.cancelled_caught:
                error = "timeout"
            self.deliveries.append(
                Delivery(event["id"], event["type"], attempt, status, error, trio.current_time())
            )
            if status is not None and 200 <= status < 300:
                self.delivered.add(event["id"])
                return
            if attempt < attempts:
                await trio.sleep(self.retry_schedule_s[attempt - 1])
        self.dropped.append(event["id"])
