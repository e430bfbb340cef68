"""The actors layer's exceptions, and the one place Redis failures are mapped to them.

As in Trio, "closed" (we shut it down) is not "broken" (a peer or the network failed):

    Exception
     ├── trio.ClosedResourceError   closed: sending to an inbox we closed (actors/inbox.py
     │                              uses Trio's own classes, with Trio's meanings)
     └── ActorError
          ├── InboxFull             an actor's inbox is full and its overflow policy is
          │                         "reject": the caller answers 503 with Retry-After
          └── ActorBroken           broken: something an actor depends on failed; retrying
               │                    later may work, and the caller decides to fail open or closed
               └── RedisUnavailable  Redis did not answer in time, or failed (the rate
                                     limiter and the shared holds)

Elsewhere: the upstream HTTP client raises the `UpstreamError` family, defined in
protocol/errors.py (parsers raise its `UpstreamMalformed`) and mapped once at the gateway's
boundary (gateway/web/errors.py); the connection pool's `PoolError` family
(actors/http1_pool.py) is mapped to it by actors/upstream.py. The accountant's
`InsufficientCredits` and `BudgetExceeded` are answers (a refusal), not failures, and live
with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import coredis.exceptions
import trio

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
