"""The policies on the request path, in the config: guardrails (`[[guardrails]]`), the response
cache (`[cache]`, and `cache`/`cache_ttl_s` on a model) and traffic mirroring
(`[[models.mirrors]]`). They run as plugins (services/plugins/, docs/plugins.md); checks across
tables (a guardrail's provider exists, a mirror's model exists) are the loader's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from msgspec import Meta

from gateway.config.values import FieldProblem, NonEmpty, Positive, PositiveInt, Table

GuardrailKind = Literal["pii", "injection", "moderation"]
GuardrailAction = Literal["block", "redact", "log"]
Stage = Literal["input", "output"]
OnError = Literal["fail_open", "fail_closed"]
# What a classifier speaks: a provider's OpenAI-compatible /v1/moderations, or a guard model
# served as chat (Llama Guard / ShieldGemma style: "safe" / "unsafe\nS1").
ClassifierFormat = Literal["moderations", "guard_chat"]
PiiEntity = Literal["email", "phone", "credit_card", "iban", "national_id", "ip_address", "secret"]
Score = Annotated[float, Meta(ge=0.0, le=1.0)]


class GuardrailConfig(Table, frozen=True):
    """One `[[guardrails]]` entry. Every kind takes `stages`, `action`, `models`, `on_error`."""

    name: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
    kind: GuardrailKind
    stages: tuple[Stage, ...] = ("input",)  # "output" includes streamed chunks
    action: GuardrailAction = "block"
    models: tuple[NonEmpty, ...] = ("*",)  # model ids the client names, or "*"
    on_error: OnError = "fail_closed"  # a classifier down or slow: let pass, or refuse (503)
    timeout_s: Positive = 5.0  # the longest one check may take (a classifier's call)
    # pii: which kinds of value (all by default).
    entities: tuple[PiiEntity, ...] = (
        "email",
        "phone",
        "credit_card",
        "iban",
        "national_id",
        "ip_address",
        "secret",
    )
    # A classifier (moderation; optional for injection, which has a built-in heuristic).
    provider: str | None = None  # a [[providers]] name
    upstream: str | None = None  # the provider's name for the classifier model
    format: ClassifierFormat = "moderations"
    thresholds: Mapping[str, Score] = {}  # category -> the score from which it triggers
    # Categories not in `thresholds`: judged against this; None: ignored (but with no
    # `thresholds` at all, every category is judged against 0.5).
    default_threshold: Score | None = None
    report_redactions: bool = False  # a redaction also writes `guardrail.triggered`
    # Only for the organizations that turn it on (PUT /v1/guardrails/{name}); otherwise it
    # applies to every organization, which cannot turn it off.
    opt_in: bool = False

    def __post_init__(self) -> None:
        if not self.stages:
            raise FieldProblem("stages", 'must name "input", "output" or both')
        if len(set(self.stages)) != len(self.stages):
            raise FieldProblem("stages", "names a stage twice")
        if not self.models:
            raise FieldProblem("models", 'must name model ids, or "*" for every model')
        if self.action == "redact" and self.kind != "pii":
            raise FieldProblem("action", '"redact" is for kind = "pii" only')
        if self.kind == "moderation" and (self.provider is None or self.upstream is None):
            missing = "provider" if self.provider is None else "upstream"
            raise FieldProblem(missing, 'is required for kind = "moderation"')
        if (self.provider is None) != (self.upstream is None):
            raise FieldProblem("upstream", "is set with provider (or neither)")
        if self.kind == "pii" and self.provider is not None:
            raise FieldProblem("provider", 'does not apply to kind = "pii"')

    def applies_to(self, model: str) -> bool:
        return "*" in self.models or model in self.models

    def threshold(self, category: str) -> float | None:
        """The score from which `category` triggers; None: the category is not judged."""
        if category in self.thresholds:
            return self.thresholds[category]
        if self.default_threshold is not None:
            return self.default_threshold
        return None if self.thresholds else 0.5


class CacheConfig(Table, frozen=True):
    """`[cache]`: the response cache (docs/cache.md). Per model, `cache` and `cache_ttl_s` on a
    `[[models]]` entry turn it on or off and change the lifetime."""

    enabled: bool = False  # the default of every model's `cache`
    mode: Literal["exact", "semantic"] = "exact"
    ttl_s: Positive = 3600.0
    semantic_threshold: Score = 0.95  # cosine similarity, semantic mode
    embeddings_model: NonEmpty | None = None  # a model id of this gateway, semantic mode
    # "database": the instance's own database (SQLite embedded, or the PostgreSQL every
    # instance shares); "redis": the instance's `redis_url`.
    store: Literal["database", "redis"] = "database"
    max_entries: PositiveInt = 100_000  # least recently used entries go first past these
    max_bytes: PositiveInt = 1_073_741_824
    max_entry_bytes: PositiveInt = 1_048_576  # a larger answer is not stored
    # Cache only requests that ask for it (`"cache": true` in the body); otherwise also those
    # deterministic enough (temperature 0; embeddings always).
    explicit_only: bool = False

    def __post_init__(self) -> None:
        if self.mode == "semantic" and self.embeddings_model is None:
            raise FieldProblem("embeddings_model", 'is required with mode = "semantic"')


class MirrorConfig(Table, frozen=True):
    """`[[models.mirrors]]`: a share of the model's requests also sent to a shadow model, in the
    background after the answer, for comparison (docs/plugins.md, "Mirroring")."""

    model: NonEmpty  # another [[models]] id
    sample_rate: Score = 0.1
    billed: bool = False  # charge the organization for the shadow call too
