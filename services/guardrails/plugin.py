"""A `[[guardrails]]` entry as a plugin (services/plugins/interface.py): PII (pii.py),
prompt injection (injection.py, plus a classifier when one is configured) and moderation (a
classifier: a provider's /v1/moderations or a guard model served as chat, called through the
`Classify` the gateway gives).

Input: the request's text (texts.py) is checked before the upstream call; `block` refuses it,
`redact` replaces each finding with its tag (`[EMAIL]`) in the body the provider gets (the
answer is not restored: the provider never saw the values), `log` only counts and logs it.
Injection is looked for in what users and tools wrote, never in the operator's own system or
developer messages. Output: the answer's text, JSON or streamed (services/plugins/
stream_guard.py), with the same actions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, Protocol

import msgspec

from services.guardrails.injection import detect_injection
from services.guardrails.pii import MAX_MATCH_CHARS, TAGS, find_pii
from services.guardrails.texts import request_slots
from services.plugins.interface import (
    Blocked,
    Exchange,
    Hook,
    OnError,
    Outcome,
    Replacement,
    Stage,
    Stored,
    apply_replacements,
)

# (text, stage) -> score per category; raises when the classifier fails (then `on_error`).
# (text, stage, the user's prompt for an answer's text) -> score per category
Classify = Callable[[str, Stage, str], Awaitable[dict[str, float]]]
Report = Callable[[Exchange, Blocked, str, bool], None]  # (request, finding, action, as event)

# Routes whose requests carry text a guardrail can read (services/guardrails/texts.py).
TEXT_ROUTES = frozenset({"chat", "responses", "embeddings", "images", "speech", "rerank"})
OUTPUT_ROUTES = frozenset({"chat", "responses"})
_OPERATOR_ROLES = frozenset({"system", "developer"})
CLASSIFIER_WINDOW = 400  # streamed text a classifier is asked about at a time


class GuardrailSettings(Protocol):
    """The fields of a `[[guardrails]]` entry this needs (gateway/config/policies.py)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> Literal["pii", "injection", "moderation"]: ...
    @property
    def stages(self) -> tuple[Stage, ...]: ...
    @property
    def action(self) -> Literal["block", "redact", "log"]: ...
    @property
    def on_error(self) -> OnError: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def entities(self) -> tuple[str, ...]: ...
    @property
    def report_redactions(self) -> bool: ...

    def applies_to(self, model: str) -> bool: ...

    def threshold(self, category: str) -> float | None: ...


class Guardrail:
    def __init__(
        self,
        settings: GuardrailSettings,
        report: Report,
        classify: Classify | None = None,
        *,
        opted_in: Callable[[str], bool] | None = None,
    ) -> None:
        """`opted_in(org_id)`: for an opt-in guardrail, whether the organization turned it on
        (a snapshot in memory: services/guardrails/opt_ins.py); None: it guards everyone."""
        self.settings = settings
        self.name = settings.name
        self.on_error: OnError = settings.on_error
        self._entities = frozenset(settings.entities)
        self._report = report
        self._classify = classify
        self._opted_in = opted_in
        # Only a classifier waits on I/O: the recognizers run without a timer.
        self.timeout_s: float | None = settings.timeout_s if classify is not None else None
        hooks: set[Hook] = set()
        if "input" in settings.stages:
            hooks.add("before")
        if "output" in settings.stages:
            hooks.add("output")
        self.hooks = frozenset(hooks)

    def applies(self, route: str, model: str) -> bool:
        if not self.settings.applies_to(model):
            return False
        stages = self.settings.stages
        return ("input" in stages and route in TEXT_ROUTES) or (
            "output" in stages and route in OUTPUT_ROUTES
        )

    def _off_for(self, exchange: Exchange) -> bool:
        return self._opted_in is not None and not self._opted_in(exchange.org_id)

    async def before(self, exchange: Exchange) -> Stored | None:
        if "input" not in self.settings.stages or self._off_for(exchange):
            return None
        try:
            decoded: Any = msgspec.json.decode(exchange.body)
            slots = request_slots(exchange.route, decoded)
        except (msgspec.DecodeError, RecursionError):
            return None  # the route refuses a body it cannot read
        if self.settings.kind == "injection":
            slots = [s for s in slots if s.role not in _OPERATOR_ROLES]
        if not slots:
            return None
        if self.settings.kind == "moderation":  # one classifier call for the whole request
            await self.findings("\n\n".join(s.text for s in slots), "input", exchange=exchange)
            return None
        changed = False
        for slot in slots:
            found = await self.findings(slot.text, "input", exchange=exchange)
            if found:
                slot.set(apply_replacements(slot.text, found))
                changed = True
        if changed:
            exchange.body = msgspec.json.encode(decoded)
            exchange.redacted = True
        return None

    def output_check(self, exchange: Exchange) -> _OutputCheck | None:
        if "output" not in self.settings.stages or exchange.route not in OUTPUT_ROUTES:
            return None
        if self._off_for(exchange):
            return None
        return _OutputCheck(self, exchange)

    async def after(self, exchange: Exchange, answer: bytes) -> bytes:
        return answer

    def finished(self, exchange: Exchange, outcome: Outcome) -> None:
        return None

    async def findings(self, text: str, stage: Stage, *, exchange: Exchange) -> list[Replacement]:
        """What to replace in `text` (action `redact`); raises `Blocked` (action `block`).
        Findings of action `log` are reported and let through."""
        settings = self.settings
        spans = await self._find(text, stage, exchange)
        if not spans:
            return []
        category = spans[0][2]
        if settings.action == "block":
            raise Blocked(settings.name, category, stage=stage, kind=settings.kind, at=spans[0][0])
        event = settings.action == "redact" and settings.report_redactions
        finding = Blocked(settings.name, category, stage=stage, kind=settings.kind)
        self._report(exchange, finding, settings.action, event)
        if settings.action == "redact":
            return _merged([Replacement(start, end, TAGS[entity]) for start, end, entity in spans])
        return []

    async def _find(
        self, text: str, stage: Stage, exchange: Exchange
    ) -> list[tuple[int, int, str]]:
        """(start, end, category) of each finding, in order."""
        kind = self.settings.kind
        if kind == "pii":
            return [(m.start, m.end, m.entity) for m in find_pii(text, self._entities)]
        if kind == "injection":
            match = detect_injection(text)
            if match is not None:
                return [(match.start, match.end, match.category)]
        if self._classify is None or not text.strip():
            return []
        prompt = _last_user_text(exchange) if stage == "output" else ""
        scores = await self._classify(text, stage, prompt)
        flagged = [
            category
            for category, score in sorted(scores.items(), key=lambda item: -item[1])
            if (limit := self.settings.threshold(category)) is not None and score >= limit
        ]
        return [(0, len(text), flagged[0])] if flagged else []


class _OutputCheck:
    """A guardrail on one answer's text (an `OutputCheck`)."""

    def __init__(self, guardrail: Guardrail, exchange: Exchange) -> None:
        self._guardrail = guardrail
        self._exchange = exchange
        classifier = guardrail.settings.kind == "moderation" or (
            guardrail.settings.kind == "injection" and guardrail._classify is not None
        )
        self.look_behind = 0 if classifier else MAX_MATCH_CHARS
        self.window = CLASSIFIER_WINDOW if classifier else 0

    async def check(self, text: str, *, final: bool) -> Sequence[Replacement]:
        return await self._guardrail.findings(text, "output", exchange=self._exchange)


def _merged(spans: list[Replacement]) -> list[Replacement]:
    """Touching spans of one tag as one (a long secret is found in pieces: one `[SECRET]`)."""
    out: list[Replacement] = []
    for span in spans:
        if out and out[-1].end == span.start and out[-1].tag == span.tag:
            out[-1] = Replacement(out[-1].start, span.end, span.tag)
        else:
            out.append(span)
    return out


def _last_user_text(exchange: Exchange) -> str:
    """The request's last user text, the context a guard model judges an answer in (read once
    per request: a stream asks once a window)."""
    known = exchange.notes.get("guardrails.prompt")
    if isinstance(known, str):
        return known
    try:
        slots = request_slots(exchange.route, msgspec.json.decode(exchange.body))
    except (msgspec.DecodeError, RecursionError):
        slots = []
    users = [s.text for s in slots if s.role == "user"]
    prompt = users[-1] if users else ""
    exchange.notes["guardrails.prompt"] = prompt
    return prompt
