"""Traffic mirroring's rules (docs/mirroring.md), pure: which requests are mirrored, what a
shadow call's job and result are, how the two answers are compared, the row one call leaves
(its answer sealed), and the comparison the admin route answers. No I/O: the calls are made
by the gateway layer (gateway/mirror/shadow.py), driven by the actor (actors/mirror.py).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from protocol.ids import ordered_id
from protocol.mirror_api import PairComparison, SideFigures, Sides
from protocol.secretbox import SecretBox
from storage.mirror_results import Figures, MirrorResult

MirrorRoute = Literal["chat", "embeddings", "responses"]

OK = "ok"
# A job the shadow side would not send (a Responses request too rich to mirror as chat, a
# route the shadow's provider does not serve): counted, never recorded as a row.
SKIPPED = "skipped"
# A shadow answer longer than this is not stored (its figures and equality still are).
MAX_SEALED_ANSWER_BYTES = 65_536

_SCALE = float(1 << 64)


def sampled(sample_rate: float, request_id: str) -> bool:
    """Whether the request `request_id` is mirrored at `sample_rate` (0 to 1): a hash of the
    id, so a retry of one request id decides the same, on every instance; 0 never, 1 always."""
    if sample_rate <= 0.0:
        return False
    if sample_rate >= 1.0:
        return True
    digest = hashlib.blake2b(request_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _SCALE < sample_rate


@dataclass(frozen=True, slots=True)
class MirrorJob:
    """One shadow call to make, after the primary request was answered."""

    org_id: str
    key_id: str | None
    request_id: str
    route: MirrorRoute
    model: str  # the primary model id the client named
    shadow: str  # the shadow model id
    billed: bool
    body: bytes  # the client's JSON request body as received
    primary_latency_ms: float
    primary_prompt_tokens: int
    primary_completion_tokens: int
    primary_cost_usd: float
    primary_answer: bytes | None  # the JSON answer sent (None for a stream)

    def __repr__(self) -> str:  # no body, no answer: they are the customer's text
        return (
            f"MirrorJob(request_id={self.request_id!r}, route={self.route!r},"
            f" model={self.model!r}, shadow={self.shadow!r}, body=***)"
        )


@dataclass(frozen=True, slots=True)
class ShadowResult:
    """What one shadow call gave: `outcome` "ok" (then `answer`, the JSON answer in the
    primary route's shape: chat for chat and responses, the embeddings list) or an error code
    (`http_<status>`, `timeout`, `unavailable`, `malformed`, `insufficient_credits`,
    `budget_exceeded`, `error`), or SKIPPED. Cost at the shadow's price, without fee."""

    outcome: str
    latency_ms: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    answer: bytes | None = None

    def __repr__(self) -> str:
        return f"ShadowResult(outcome={self.outcome!r}, latency_ms={self.latency_ms:.1f})"


# -- comparing answers ---------------------------------------------------------------------

_Comparable = tuple[Any, ...]


def _text(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):  # content parts: their texts
        return "".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict)
        ).strip()
    return msgspec.json.encode(content).decode()


def _calls(calls: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(calls, list):
        return ()
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            out.append((str(function.get("name", "")), str(function.get("arguments", ""))))
    return tuple(out)


def _chat_choices(answer: dict[str, Any]) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    choices = answer.get("choices")
    if not isinstance(choices, list):
        raise ValueError("no choices")
    ordered = sorted(
        (c for c in choices if isinstance(c, dict)), key=lambda c: int(c.get("index", 0))
    )
    out = []
    for choice in ordered:
        message = choice.get("message") or {}
        out.append((_text(message.get("content")), _calls(message.get("tool_calls"))))
    return out


def _response_output(answer: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A Responses object's text (its messages' output_text parts) and function calls."""
    texts: list[str] = []
    calls: list[tuple[str, str]] = []
    for item in answer.get("output") or ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict) and part.get("type") == "output_text":
                    texts.append(str(part.get("text", "")))
        elif item.get("type") == "function_call":
            calls.append((str(item.get("name", "")), str(item.get("arguments", ""))))
    return "".join(texts).strip(), tuple(calls)


def _comparable(route: MirrorRoute, answer: bytes, *, primary: bool) -> _Comparable:
    value = msgspec.json.decode(answer)
    if not isinstance(value, dict):
        raise ValueError("not an object")
    if route == "embeddings":
        data = sorted(
            (d for d in value.get("data") or () if isinstance(d, dict)),
            key=lambda d: int(d.get("index", 0)),
        )
        return tuple(msgspec.json.encode(d.get("embedding")) for d in data)
    if route == "responses" and primary:  # the primary's Responses object
        return (_response_output(value),)
    choices = _chat_choices(value)
    if route == "responses":  # the shadow, asked as chat: its first choice
        return tuple(choices[:1])
    return tuple(choices)


def answers_equal(route: MirrorRoute, primary: bytes | None, shadow: bytes | None) -> bool | None:
    """Whether the two answers say the same: for chat (and responses), each choice's text
    (trimmed) and tool calls (name, arguments); for embeddings, the vectors. None when either
    is missing (a streamed primary, a failed shadow) or is not an answer of its kind."""
    if primary is None or shadow is None:
        return None
    try:
        return _comparable(route, primary, primary=True) == _comparable(
            route, shadow, primary=False
        )
    except (msgspec.DecodeError, ValueError, TypeError, RecursionError):
        return None


# -- the row -------------------------------------------------------------------------------


def result_row(job: MirrorJob, result: ShadowResult, box: SecretBox, now_us: int) -> MirrorResult:
    """The row one shadow call leaves: both sides' figures, whether the answers are equal,
    the shadow's answer sealed by `box` (MIRROR_ANSWERS) for (org id, row id); none when
    longer than MAX_SEALED_ANSWER_BYTES or when the box refuses (a retired master key)."""
    row_id = ordered_id("mir", now_us)
    sealed = None
    answer = result.answer
    if answer is not None and len(answer) <= MAX_SEALED_ANSWER_BYTES:
        try:
            sealed = box.seal(answer.decode("utf-8", "replace"), (job.org_id, row_id))
        except Exception:  # master_key_rotated: the figures are kept without the answer
            sealed = None
    return MirrorResult(
        id=row_id,
        org_id=job.org_id,
        key_id=job.key_id,
        request_id=job.request_id,
        route=job.route,
        model=job.model,
        shadow=job.shadow,
        created_at=now_us,
        billed=job.billed,
        primary_latency_ms=job.primary_latency_ms,
        primary_prompt_tokens=job.primary_prompt_tokens,
        primary_completion_tokens=job.primary_completion_tokens,
        primary_cost_usd=job.primary_cost_usd,
        outcome=result.outcome,
        shadow_latency_ms=result.latency_ms,
        shadow_prompt_tokens=result.prompt_tokens,
        shadow_completion_tokens=result.completion_tokens,
        shadow_cost_usd=result.cost_usd,
        answers_equal=(
            answers_equal(job.route, job.primary_answer, answer) if result.outcome == OK else None
        ),
        shadow_answer_sealed=sealed,
    )


def open_answer(box: SecretBox, row: MirrorResult) -> bytes | None:
    """The shadow answer a row holds, opened (SecretBoxError if it does not open)."""
    if row.shadow_answer_sealed is None:
        return None
    return box.open(row.shadow_answer_sealed, (row.org_id, row.id)).encode()


# -- the comparison ------------------------------------------------------------------------


def percentile(values: Sequence[float], share: float) -> float | None:
    """Nearest rank (as the actor tree's p99); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(len(ordered) * share) - 1)]


def _mean(values: Sequence[int]) -> float | None:
    return sum(values) / len(values) if values else None


def _side(
    latency: list[float], prompt: list[int], completion: list[int], cost: float
) -> SideFigures:
    return SideFigures(
        calls=len(latency),
        latency_ms_p50=percentile(latency, 0.50),
        latency_ms_p95=percentile(latency, 0.95),
        mean_prompt_tokens=_mean(prompt),
        mean_completion_tokens=_mean(completion),
        cost_usd=round(cost, 9),
    )


def compare(rows: Iterable[Figures]) -> list[PairComparison]:
    """Per (model, shadow), in that order: requests, errors, outcomes, each side's latency
    p50/p95, mean tokens and total cost (the primary over every row, the shadow's latency and
    tokens over its answered calls), and the share of equal answers among the comparable."""
    pairs: dict[tuple[str, str], list[Figures]] = defaultdict(list)
    for row in rows:
        pairs[row.model, row.shadow].append(row)
    out = []
    for (model, shadow), group in sorted(pairs.items()):
        answered = [r for r in group if r.outcome == OK]
        compared = [r.answers_equal for r in group if r.answers_equal is not None]
        out.append(
            PairComparison(
                model=model,
                shadow=shadow,
                requests=len(group),
                errors=len(group) - len(answered),
                outcomes=dict(sorted(Counter(r.outcome for r in group).items())),
                figures=Sides(
                    primary=_side(
                        [r.primary_latency_ms for r in group],
                        [r.primary_prompt_tokens for r in group],
                        [r.primary_completion_tokens for r in group],
                        sum(r.primary_cost_usd for r in group),
                    ),
                    shadow=_side(
                        [r.shadow_latency_ms for r in answered],
                        [r.shadow_prompt_tokens for r in answered],
                        [r.shadow_completion_tokens for r in answered],
                        sum(r.shadow_cost_usd for r in group),
                    ),
                ),
                compared=len(compared),
                equal_share=sum(compared) / len(compared) if compared else None,
            )
        )
    return out
