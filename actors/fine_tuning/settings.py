"""`[fine_tuning]`: the watcher's settings, defined where they are used; the config loader
(gateway/config/) converts the table into this (unknown keys refused, each constraint checked)."""

from __future__ import annotations

import sys
from typing import Annotated

import msgspec

Positive = Annotated[float, msgspec.Meta(gt=0, le=sys.float_info.max)]  # finite and > 0


class FineTuningConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`[fine_tuning]`: how jobs are followed at their providers (docs/fine_tuning.md).

    `poll_max_s` is at least `poll_initial_s` (checked by the loader, with the key named)."""

    poll_initial_s: Positive = 1.0  # first wait between two polls of a provider job
    poll_max_s: Positive = 30.0  # the wait doubles after each poll (and each error) up to this
    lease_ttl_s: Positive = 60.0  # a job's watcher renews within this, else another instance takes
    scan_interval_s: Positive = 5.0  # how often an instance looks for jobs nobody watches
    max_watched: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 200  # jobs watched at once
    max_example_tokens: Annotated[int, msgspec.Meta(ge=1)] = 65_536  # a longer one fails the job
    events_poll_s: Positive = 1.0  # an SSE stream of job events looks for new ones this often
