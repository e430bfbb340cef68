"""Failures on command, per model: what a request to a given model suffers, decided when it starts.

`UpstreamBehavior.faults` maps an upstream model name (the `model` of the request body) to a
`Faults`; requests naming another model, or none (GET, multipart, a body that is not JSON),
are untouched. With `faults` empty (the default) nothing here runs: the body is not even read.

Which requests are hit: with `every` = k, only the k-th, 2k-th, ... request to the model since
its `Faults` took effect (a new object, or a new `fault_seed`, starts the count again); the
others are answered normally. Of those, `error_rate` and `rate_limit_rate` are one draw from a
per-model `random.Random` seeded with `f"{fault_seed}:{model}"`, so a seed gives the same
sequence every run, and one model's draws never depend on another's traffic. The deterministic
kinds (stall, stream cuts, slow first byte) hit every request that passes the `every` gate.

`FaultBook` keeps, per model, the requests seen while any fault was configured and what was
done to them (`UpstreamServer.fault_statistics()`). No I/O here; the server carries plans out.
"""

from __future__ import annotations

import enum
import math
import random
from dataclasses import dataclass, field, fields

import msgspec


@dataclass
class Faults:
    """What requests to one model suffer. A "frame" is a content chunk, as `break_after_chunks`
    counts them (N=0: right after the head and the stream's opening frames)."""

    error_rate: float = 0.0  # fraction answered `error_status`, the provider's error body
    error_status: int = 500  # 500..599
    rate_limit_rate: float = 0.0  # fraction answered 429 (drawn after error_rate)
    retry_after: str | None = None  # Retry-After header of those 429s
    stall: bool = False  # accept the request, send nothing until the client leaves
    # Send the head (SSE: and N frames), then nothing until the client leaves. JSON: head only.
    stall_after_frames: int | None = None
    # SSE: after N frames reset the connection (TCP RST). JSON: reset before sending anything.
    reset_after_frames: int | None = None
    # SSE (chat completions, messages): after N frames send the provider's in-stream error event
    # (typed by error_status), then end the stream. Other replies ignore it.
    error_frame_after: int | None = None
    slow_first_byte_s: float = 0.0  # delay before the response head (on top of latency_s)
    every: int = 1  # only the every-th request to the model suffers any of the above

    def __post_init__(self) -> None:
        check_faults(self)


def check_faults(faults: Faults) -> None:
    """Raise ValueError naming the first setting out of range."""
    for name in ("error_rate", "rate_limit_rate"):
        rate = getattr(faults, name)
        if not (isinstance(rate, int | float) and 0.0 <= rate <= 1.0):
            raise ValueError(f"{name} must be between 0 and 1, not {rate!r}")
    if faults.error_rate + faults.rate_limit_rate > 1.0:
        raise ValueError("error_rate + rate_limit_rate must not exceed 1")
    if not (isinstance(faults.error_status, int) and 500 <= faults.error_status <= 599):
        raise ValueError(f"error_status must be a 5xx status, not {faults.error_status!r}")
    retry = faults.retry_after
    if retry is not None and (not retry or not retry.isprintable() or not retry.isascii()):
        raise ValueError(f"retry_after must be a printable header value, not {retry!r}")
    for name in ("stall_after_frames", "reset_after_frames", "error_frame_after"):
        frames = getattr(faults, name)
        if frames is not None and not (isinstance(frames, int) and frames >= 0):
            raise ValueError(f"{name} must be a whole number >= 0, not {frames!r}")
    delay = faults.slow_first_byte_s
    if not (isinstance(delay, int | float) and math.isfinite(delay) and delay >= 0):
        raise ValueError(f"slow_first_byte_s must be a finite number >= 0, not {delay!r}")
    if not (isinstance(faults.every, int) and faults.every >= 1):
        raise ValueError(f"every must be a whole number >= 1, not {faults.every!r}")


FAULT_SETTINGS = tuple(f.name for f in fields(Faults))


class Cut(enum.Enum):
    """How a stream hit by a fault ends once its frames run out (`FaultPlan.cut_after`)."""

    RESET = "reset"
    ERROR_FRAME = "error_frame"
    STALL = "stall_after_frames"


# Counted kinds, in the order fault_statistics() lists them.
KINDS = (
    "error",
    "rate_limit",
    "stall",
    "stall_after_frames",
    "reset",
    "error_frame",
    "slow_first_byte",
)


@dataclass(slots=True)
class ModelCounts:
    """One model's requests (seen while any fault was configured) and faults done, by kind."""

    requests: int = 0
    done: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))

    def count(self, kind: str) -> None:
        self.done[kind] += 1

    def as_dict(self) -> dict[str, int]:
        return {"requests": self.requests, **self.done}


@dataclass(slots=True)
class FaultPlan:
    """What one request suffers. The server applies status/delay/stall to the request's
    behavior snapshot, and the cut to its reply; it counts each as it happens in `counts`."""

    counts: ModelCounts
    status: int | None = None  # answer this error (rate limit or error) instead
    retry_after: str | None = None
    delay_s: float = 0.0
    stall: bool = False
    cut: Cut | None = None
    cut_after: int = 0
    error_status: int = 500  # types the error frame


@dataclass(slots=True)
class _Track:
    counts: ModelCounts
    source: Faults | None = None  # the Faults object the gate count and draws belong to
    seed: int = 0
    seen: int = 0
    rng: random.Random | None = None


class _Model(msgspec.Struct):
    model: str = ""


_model_decoder = msgspec.json.Decoder(_Model)

# On a tie between stream cuts (same N), the earlier one here wins.
_CUTS = (
    ("reset_after_frames", Cut.RESET),
    ("error_frame_after", Cut.ERROR_FRAME),
    ("stall_after_frames", Cut.STALL),
)


def body_model(body: bytes) -> str:
    """The `model` of a JSON body; "" when there is none or the body is not a JSON object."""
    try:
        return _model_decoder.decode(body).model
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return ""


class FaultBook:
    """Per-model state across requests: gate counts, random draws and what was done."""

    def __init__(self) -> None:
        self._tracks: dict[str, _Track] = {}

    def statistics(self) -> dict[str, dict[str, int]]:
        return {model: track.counts.as_dict() for model, track in self._tracks.items()}

    def plan(self, body: bytes, faults: dict[str, Faults], seed: int) -> FaultPlan | None:
        """What this request suffers; None when nothing (no model, or it passed untouched)."""
        model = body_model(body)
        if not model:
            return None
        track = self._tracks.get(model)
        if track is None:
            track = self._tracks[model] = _Track(ModelCounts())
        track.counts.requests += 1
        settings = faults.get(model)
        if settings is None:
            return None
        if track.source is not settings or track.seed != seed:
            track.source, track.seed, track.seen, track.rng = settings, seed, 0, None
        track.seen += 1
        if track.seen % settings.every:
            return None
        plan = FaultPlan(track.counts, error_status=settings.error_status)
        if settings.stall:
            plan.stall = True
            return plan
        plan.delay_s = settings.slow_first_byte_s
        if settings.error_rate > 0 or settings.rate_limit_rate > 0:
            if track.rng is None:
                track.rng = random.Random(f"{seed}:{model}")
            draw = track.rng.random()
            if draw < settings.error_rate:
                plan.status = settings.error_status
            elif draw < settings.error_rate + settings.rate_limit_rate:
                plan.status, plan.retry_after = 429, settings.retry_after
        if plan.status is None:
            cuts = [(getattr(settings, name), cut) for name, cut in _CUTS]
            chosen = min(
                ((n, i, cut) for i, (n, cut) in enumerate(cuts) if n is not None), default=None
            )
            if chosen is not None:
                plan.cut_after, _, plan.cut = chosen
        return plan
