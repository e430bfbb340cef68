"""Which organizations turned on each opt-in guardrail, as the request path reads it: a
snapshot in memory (no I/O per request), replaced by the refresh actor
(actors/opt_in_refresh.py) and changed at once on the instance that served the change."""

from __future__ import annotations

from collections.abc import Mapping


class OptIns:
    def __init__(self) -> None:
        self._orgs: dict[str, frozenset[str]] = {}

    def enabled(self, guardrail: str, org_id: str) -> bool:
        return org_id in self._orgs.get(guardrail, frozenset())

    def replace(self, snapshot: Mapping[str, frozenset[str]]) -> None:
        self._orgs = dict(snapshot)

    def set(self, guardrail: str, org_id: str, *, enabled: bool) -> None:
        orgs = self._orgs.get(guardrail, frozenset())
        self._orgs[guardrail] = orgs | {org_id} if enabled else orgs - {org_id}
