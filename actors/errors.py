"""The actors layer's exceptions, and the one place Redis failures are mapped to them.

As in Trio, "closed" (we shut it down) is not "broken" (a peer or the network failed):

    Exception
     ├── trio.ClosedResourceError   closed: sending to an inbox we closed (actors/inbox.py
     │                              uses Trio's own classes, with Trio's meanings)
     ├── ActorError
     │    ├── InboxFull             an actor's inbox is full and its overflow policy is
     │    │                         "reject": the caller answers 503 with Retry-After
     │    └── ActorBroken           broken: something an actor depends on failed; retrying
     │         │                    later may work, and the caller decides to fail open or closed
     │         └── RedisUnavailable  Redis did not answer in time, or failed (the rate
     │                              limiter and the shared holds)
     ├── GaveUp                     a supervised child crashed more often than its policy
     │                              allows and the policy says "escalate" (actors/supervisor.py)
     ├── InsufficientCredits        the accountant's refusals: answers, not failures (402)
     ├── BudgetExceeded             ... a key's daily or monthly cap cannot hold the reservation
     ├── Stale                      an HTTP/1.1 connection closed or reset before any response
     │                              byte: the pool retries a kept-alive request elsewhere
     ├── protocol.errors.UpstreamError   (protocol/errors.py; the connection pool raises these
     │    │                              members without a provider, the upstream client names
     │    │                              it: actors/upstream.py `mapped_errors`)
     │    ├── UpstreamUnavailable
     │    │    ├── ConnectFailed    the TCP/TLS connection could not be opened in time
     │    │    └── ConnectionBroken  the peer closed or reset the connection mid-response
     │    └── UpstreamTimeout
     │         └── ReadTimedOut     no complete head, or no next body bytes, within the read
     │                              timeout (or the peer read none of the body for that long)
     └── ValueError
          ├── Refused               a webhook URL's host resolves to an address deliveries may
          │                         not reach (`why`: its class)
          └── PortRefused           a webhook URL names a port deliveries may not use

So "the upstream is unavailable" and "it timed out" have one meaning each, whoever notices:
the gateway's boundary (gateway/web/errors.py) maps the whole `UpstreamError` family.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import coredis.exceptions
import trio

from protocol.errors import UpstreamTimeout, UpstreamUnavailable

if TYPE_CHECKING:
    from protocol.billing import KeyBudget, Period

# What a Redis call raises when Redis or the network fails (coredis raises TimeoutError and
# OSError subclasses for the socket).
_REDIS_FAILURES = (coredis.exceptions.RedisError, OSError, TimeoutError)


class ActorError(Exception):
    """Base of the actors layer's own exceptions."""


class InboxFull(ActorError):
    """An inbox with overflow "reject" was full: the actor is overloaded; try again shortly."""

    retry_after_s = 1

    def __init__(self, inbox: str, capacity: int) -> None:
        super().__init__(f"the {inbox or 'actor'} inbox is full ({capacity} messages waiting)")
        self.inbox = inbox
        self.capacity = capacity


class ActorBroken(ActorError):
    """Something the actor depends on failed (not shut down by us)."""


class RedisUnavailable(ActorBroken):
    """Redis could not answer in time, or failed."""


class GaveUp(Exception):
    """A child crashed more than its policy allows and its policy says "escalate"."""


class InsufficientCredits(Exception):
    def __init__(self, org_id: str, available_micros: int, needed_micros: int) -> None:
        super().__init__(f"{org_id}: {available_micros} available, {needed_micros} needed")
        self.available_micros = available_micros
        self.needed_micros = needed_micros


class BudgetExceeded(Exception):
    """The key's daily or monthly cap cannot hold the reservation."""

    def __init__(
        self,
        budget: KeyBudget,
        period: Period,
        cap: int,
        committed: int,
        held: int | None = None,
    ) -> None:
        super().__init__(f"{budget.key_id}: {period.label} cap {cap}, committed {committed}")
        self.budget = budget
        self.period = period
        self.cap = cap
        self.committed = committed  # spent + settled-unwritten + reserved, before this request
        self.held = held  # the reserved part of it (None: not known apart)


class Stale(Exception):
    """The connection closed (`eof`) or reset before any response byte."""

    def __init__(self, *, eof: bool) -> None:
        super().__init__("connection closed before the response")
        self.eof = eof


class ConnectFailed(UpstreamUnavailable):
    """Raised by the connection pool without a provider (`named` adds it)."""

    def __init__(self, message: str) -> None:
        super().__init__("", message)


class ConnectionBroken(UpstreamUnavailable):
    def __init__(self, message: str, *, eof: bool = False) -> None:
        super().__init__("", message)
        self.eof = eof  # closed (not reset) by the peer


class ReadTimedOut(UpstreamTimeout):
    def __init__(self, message: str) -> None:
        super().__init__("", message)


class Refused(ValueError):
    """A resolved address is one deliveries may not reach; `why` is its class."""

    def __init__(self, why: str) -> None:
        super().__init__(f"the URL's host resolves to a {why} address, not allowed")
        self.why = why


class PortRefused(ValueError):
    """The URL names a port deliveries may not use."""

    def __init__(self, port: int) -> None:
        super().__init__(f"the URL's port {port} is not allowed")
        self.port = port


@contextmanager
def redis_call(timeout_s: float) -> Iterator[None]:
    """Bound the block by `timeout_s` and turn Redis or network failures (and the time limit)
    into RedisUnavailable. Cancellation from outside passes through unchanged."""
    try:
        with trio.fail_after(timeout_s):
            yield
    except trio.TooSlowError as exc:
        raise RedisUnavailable(f"Redis did not answer within {timeout_s} s") from exc
    except _REDIS_FAILURES as exc:
        raise RedisUnavailable(f"Redis failed: {exc!r}") from exc
