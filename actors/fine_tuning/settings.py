"""`[fine_tuning]`: the watcher's settings, defined where they are used; the config loader
(gateway/config/) reads the table into this."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FineTuningConfig:
    """`[fine_tuning]`: how jobs are followed at their providers (docs/fine_tuning.md)."""

    poll_initial_s: float = 1.0  # first wait between two polls of a provider job
    poll_max_s: float = 30.0  # the wait doubles after each poll (and each error) up to this
    lease_ttl_s: float = 60.0  # a job's watcher renews within this, else another instance takes
    scan_interval_s: float = 5.0  # how often an instance looks for jobs nobody watches
    max_watched: int = 200  # jobs one instance watches at once
    max_example_tokens: int = 65_536  # a longer training example fails the job
    events_poll_s: float = 1.0  # an SSE stream of job events looks for new ones this often
