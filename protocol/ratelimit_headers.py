"""Requests-per-minute limiting by GCRA, and the headers that report a decision. No I/O.

GCRA (the generic cell rate algorithm) keeps one number per key, the theoretical arrival time
TAT: when the key would next be "due" if its requests had arrived evenly. With ``rpm`` allowed
per minute, the emission interval is ``T = 60 / rpm`` seconds and the burst tolerance is one
minute, so a request arriving at ``now`` is admitted iff ``max(TAT, now) - now <= 60 - T``, and
then ``TAT = max(TAT, now) + T``; a refused request leaves TAT alone.

Why GCRA: O(1) state per key (one timestamp, one atomic read-modify-write in Redis), exact
(no sampling or counters per window), and no fixed-window edge: a fixed window lets ``rpm``
requests through at the end of one window and ``rpm`` more at the start of the next, 2x in an
instant. GCRA never admits more than ``rpm`` at once; after a full burst it refills one request
per ``T``. It is a token bucket of capacity ``rpm`` refilled at ``rpm`` per minute, so a sliding
60 s window can still see up to ``2 * rpm - 1`` (a burst, then the refill) — but never at once.

Arithmetic is in integer microseconds: ``T`` is rounded to the microsecond and the tolerance is
written ``(rpm - 1) * T`` (equal to ``60 - T`` up to that rounding). With float seconds the
``rpm``-th request of a burst would depend on how ``rpm`` additions of ``T`` happen to round;
with integers a burst after an idle minute is exactly ``rpm`` for every ``rpm``, and the Redis
script (Lua numbers are doubles, exact for integers below 2**53) does the same sums. The
sustained rate is off by at most ``rpm / 120e6`` (0.05% at 60,000 rpm, 0.8% at a million).
"""

from __future__ import annotations

from dataclasses import dataclass

_MINUTE_US = 60_000_000
_US = 1_000_000


@dataclass(frozen=True, slots=True)
class RateDecision:
    """One admission decision, with what the rate-limit headers report."""

    allowed: bool
    limit: int  # rpm
    remaining: int  # requests that could still be admitted right now (after this one if allowed)
    reset_s: float  # seconds until the limiter is fully reset (remaining back to limit)
    retry_after_s: float  # 0 when allowed; else seconds until one request would be admitted


def gcra_params_us(rpm: int) -> tuple[int, int]:
    """The emission interval ``T`` and the burst tolerance ``(rpm - 1) * T``, in microseconds."""
    if rpm < 1:
        raise ValueError(f"rpm must be >= 1, got {rpm}")
    # Rounded to the nearest microsecond, and at least one: above 120 million rpm it would
    # round to 0 (no limit at all); capped at 60 million a minute instead.
    interval = max(1, (_MINUTE_US + rpm // 2) // rpm)
    return interval, (rpm - 1) * interval


def gcra_us(tat_us: int, now_us: int, rpm: int) -> tuple[RateDecision, int]:
    """Decide one request at ``now_us`` given the key's TAT; return the decision and the new TAT.

    The new TAT is ``tat_us`` itself when the request is refused. A TAT in the past is the same
    as no state at all.
    """
    interval, tolerance = gcra_params_us(rpm)
    start = max(tat_us, now_us)
    allowed = start - now_us <= tolerance
    new_tat = start + interval if allowed else tat_us
    ahead = max(new_tat, now_us) - now_us  # how far the key's schedule runs ahead of now
    remaining = (tolerance - ahead) // interval + 1 if ahead <= tolerance else 0
    decision = RateDecision(
        allowed=allowed,
        limit=rpm,
        remaining=remaining,
        reset_s=ahead / _US,
        retry_after_s=0.0 if allowed else (ahead - tolerance) / _US,
    )
    return decision, new_tat


def gcra(tat: float, now: float, rpm: int) -> tuple[RateDecision, float]:
    """`gcra_us` on seconds: the decision and the new TAT (``tat`` itself when refused)."""
    decision, new_tat = gcra_us(_micros(tat), _micros(now), rpm)
    return decision, (new_tat / _US if decision.allowed else tat)


def decision_headers(d: RateDecision) -> list[tuple[str, str]]:
    """The OpenAI rate-limit headers for ``d``, plus ``retry-after`` when it was refused.

    Names are lower case (HTTP/2 and ASGI want them so). Durations are rounded up to the
    millisecond, and Retry-After up to a whole second, at least 1: a client that waits what it
    is told is admitted.
    """
    headers = [
        ("x-ratelimit-limit-requests", str(d.limit)),
        ("x-ratelimit-remaining-requests", str(d.remaining)),
        ("x-ratelimit-reset-requests", format_duration(d.reset_s)),
    ]
    if not d.allowed:
        seconds = -(-_micros(d.retry_after_s) // _US)
        headers.append(("retry-after", str(max(1, seconds))))
    return headers


def format_duration(seconds: float) -> str:
    """OpenAI's duration style (Go's): ``"250ms"``, ``"1s"``, ``"1.5s"``, ``"6m0s"``, ``"1h0m0s"``.

    Rounded up to the millisecond; zero and negative durations are ``"0s"``.
    """
    ms = max(0, -(-_micros(seconds) // 1000))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    whole, frac = divmod(rest, 1000)
    text = f"{whole}.{frac:03d}".rstrip("0") if frac else str(whole)
    if hours:
        return f"{hours}h{minutes}m{text}s"
    if minutes:
        return f"{minutes}m{text}s"
    return f"{text}s"


def _micros(seconds: float) -> int:
    return round(seconds * _US)
