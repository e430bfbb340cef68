"""The usage analytics wire types (GET /v1/usage; docs/usage.md): a row per group with the
fields grouped by (only those: a field not grouped by is absent, not null) and its sums, and
the range the sums cover. Cost is USD on the wire, integer micro-USD everywhere else."""

from __future__ import annotations

import msgspec
from msgspec import UNSET, UnsetType


class UsageGroup(msgspec.Struct, kw_only=True):
    # Group fields (present when grouped by): null for a request without a key (a mirrored
    # call: the organization's) or a provider (a cached answer), or before a model was known.
    key_id: str | None | UnsetType = UNSET
    model: str | None | UnsetType = UNSET
    provider: str | None | UnsetType = UNSET
    day: str | UnsetType = UNSET  # "2026-11-27" (UTC)
    hour: str | UnsetType = UNSET  # "2026-11-27T13:00:00Z"
    requests: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    errors: int


class UsageReport(msgspec.Struct, kw_only=True):
    data: list[UsageGroup]
    total_cost_usd: float
    start_date: str  # the range summed, whole UTC hours: [start_date, end_date)
    end_date: str
