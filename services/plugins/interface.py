"""What a plugin is: the hooks every inference route runs, in order, around its upstream call
(docs/plugins.md shows how to write one).

    before(exchange)          before the upstream call: may refuse (`Blocked`), rewrite the
                              request body (`exchange.body`), or answer from elsewhere (return a
                              `Stored` answer: the cache)
    output_check(exchange)    for an answer's text (JSON and streamed): an `OutputCheck` that
                              sees the text as it is produced, or None
    after(exchange, answer)   the JSON answer before it is billed and sent: may refuse or
                              rewrite it (an output guardrail does this through its
                              OutputCheck; the cache does nothing here)
    finished(exchange, out)   after the client got a whole answer: store it, mirror it — must
                              not block (work goes to the background)

A plugin that raises anything but `Blocked` (or runs past its `timeout_s`) has failed; its
`on_error` decides: `fail_open` lets the request on as if the plugin had passed, `fail_closed`
refuses it with 503 `plugin_unavailable`. Neither is ever a 500.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

OnError = Literal["fail_open", "fail_closed"]
Stage = Literal["input", "output"]


class Blocked(Exception):
    """A plugin refuses the request (or cuts the answer): 400 `guardrail_blocked`, or the
    stream's error frame. `plugin` and `category` name the rule, never the matched text."""

    def __init__(
        self, plugin: str, category: str, *, stage: Stage, kind: str = "", at: int | None = None
    ) -> None:
        super().__init__(f"The request was blocked by the guardrail {plugin!r} ({category}).")
        self.plugin = plugin
        self.category = category
        self.stage: Stage = stage
        self.kind = kind
        self.at = at  # where in the text checked the finding starts, when known


class PluginUnavailable(Exception):
    """A `fail_closed` plugin failed or timed out: 503 `plugin_unavailable`."""

    def __init__(self, plugin: str) -> None:
        super().__init__(
            f"The check {plugin!r} is unavailable and this model may not be used without it;"
            " retry the request."
        )
        self.plugin = plugin


@dataclass(frozen=True, slots=True)
class Stored:
    """An answer from elsewhere (the cache): the JSON body, or the SSE frames exactly as a
    client got them, with the usage they were produced with."""

    kind: Literal["json", "sse"]
    body: bytes
    prompt_tokens: int
    completion_tokens: int


@dataclass(slots=True)
class Exchange:
    """One request as plugins see it. `body` is the JSON request body (a `before` hook may
    replace it: the route then forwards the new one); `notes` keeps a plugin's state between
    its hooks of one request; `headers` are added to the answer."""

    route: str  # "chat", "responses", "embeddings", "images", "speech", "rerank", ...
    model: str  # the model id the client named
    org_id: str
    key_id: str | None
    request_id: str
    stream: bool
    body: bytes
    own_key: bool = False  # the org's own provider key (bring-your-own-key)
    cache_opt: bool | None = None  # the client's `"cache": true|false`; None: not said
    no_cache: bool = False  # `Cache-Control: no-cache` / `no-store`
    notes: dict[str, object] = field(default_factory=dict)
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    redacted: bool = False  # a `before` hook changed the body (it is no longer the client's)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the client got, for `finished`: the answer (JSON body, or the SSE frames as sent),
    its usage, and how long the upstream took."""

    kind: Literal["json", "sse"]
    body: bytes
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    cost_usd: float


class OutputCheck(Protocol):
    """Judges an answer's text as it is produced (services/plugins/stream_guard.py).

    `look_behind` is the most characters a finding can span: a stream holds back that much
    text, so that a value split across chunks is found before any of it reaches the client.
    `window`: how much new text is worth a check (0: every chunk; a classifier called over
    the network asks for a few hundred characters at a time). `check(text, final=...)` is
    given the new text with up to `look_behind` characters before it (`final`: the answer
    ended) and returns the spans to replace, or raises `Blocked` (with `at`, where the finding
    starts in `text`) to cut the answer there."""

    @property
    def look_behind(self) -> int: ...

    @property
    def window(self) -> int: ...

    async def check(self, text: str, *, final: bool) -> Sequence[Replacement]: ...


@dataclass(frozen=True, slots=True)
class Replacement:
    """Replace `text[start:end]` with `tag` (a redaction)."""

    start: int
    end: int
    tag: str


Hook = Literal["before", "output", "after", "finished"]
ALL_HOOKS: frozenset[Hook] = frozenset({"before", "output", "after", "finished"})


class Plugin(Protocol):
    name: str
    on_error: OnError
    # The longest a hook may take; None: its hooks never wait on I/O (no timer is armed: a
    # timeout could not interrupt them anyway, and a cancel scope per call is measurable).
    timeout_s: float | None
    # The hooks it uses (the pipeline calls no other): e.g. {"before", "finished"}.
    hooks: frozenset[Hook]

    def applies(self, route: str, model: str) -> bool:
        """Whether the plugin runs for requests of `route` naming `model` (decided once per
        request, without I/O)."""
        ...

    async def before(self, exchange: Exchange) -> Stored | None: ...

    def output_check(self, exchange: Exchange) -> OutputCheck | None: ...

    async def after(self, exchange: Exchange, answer: bytes) -> bytes: ...

    def finished(self, exchange: Exchange, outcome: Outcome) -> None: ...


def apply_replacements(text: str, spans: Sequence[Replacement]) -> str:
    """`text` with each span replaced by its tag (spans overlapping an earlier one skipped)."""
    out: list[str] = []
    at = 0
    for span in sorted(spans, key=lambda s: s.start):
        if span.start < at:
            continue
        out.append(text[at : span.start])
        out.append(span.tag)
        at = span.end
    out.append(text[at:])
    return "".join(out)
