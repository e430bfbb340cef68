"""GET /v1/admin/mirrors: the comparison of each mirrored (model, shadow) pair
(docs/mirroring.md). Wire shapes only; computed by services/mirror.py `compare`."""

from __future__ import annotations

import msgspec


class SideFigures(msgspec.Struct, kw_only=True):
    """One side of a pair (the primary model, or the shadow), over the calls counted for it:
    every row for the primary, the shadow's answered calls (outcome "ok") for the shadow."""

    calls: int  # the rows these figures are over
    latency_ms_p50: float | None  # nearest rank; None without calls
    latency_ms_p95: float | None
    mean_prompt_tokens: float | None
    mean_completion_tokens: float | None
    cost_usd: float  # the total, over every row (a failed shadow call costs 0)


class Sides(msgspec.Struct, kw_only=True):
    primary: SideFigures
    shadow: SideFigures


class PairComparison(msgspec.Struct, kw_only=True):
    model: str  # the primary model id the clients named
    shadow: str  # the shadow's [[models]] id
    requests: int  # shadow calls recorded (one per mirrored request)
    errors: int  # of which the shadow failed (outcome other than "ok")
    outcomes: dict[str, int]  # calls per outcome ("ok", "http_503", "timeout", ...)
    figures: Sides
    compared: int  # calls whose answers could be compared (both JSON, shadow ok)
    equal_share: float | None  # of those, the share whose answers' text was equal


class MirrorComparison(msgspec.Struct, kw_only=True):
    since: str | None  # ISO 8601, the window's start; None: every retained row
    pairs: list[PairComparison]
