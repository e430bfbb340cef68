"""The guardrails API's wire types (GET /v1/guardrails, PUT /v1/guardrails/{name};
docs/guardrails.md, "Opt-in guardrails"). The same structs validate requests and describe them
in /openapi.json."""

from __future__ import annotations

import msgspec


class GuardrailItem(msgspec.Struct, kw_only=True):
    """A configured guardrail as an organization sees it."""

    object: str = "guardrail"
    name: str
    kind: str  # pii | injection | moderation
    stages: list[str]  # input, output
    action: str  # block | redact | log
    models: list[str]  # model ids, or "*"
    on_error: str  # fail_open | fail_closed
    opt_in: bool  # applies only to organizations that turn it on
    enabled: bool  # applies to the caller's organization


class GuardrailList(msgspec.Struct, kw_only=True):
    object: str = "list"
    data: list[GuardrailItem]


class GuardrailSwitch(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    enabled: bool
