"""The opt-in guardrails each organization turned on (migration 0022): a row per organization
and guardrail, there while it is on. The request path never reads this table: it reads a
snapshot an actor refreshes (actors/opt_in_refresh.py)."""

from __future__ import annotations

from collections import defaultdict

from protocol.timefmt import now_us
from storage.database import Database


class OrgGuardrailRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def enabled(self, org_id: str) -> set[str]:
        """The guardrails `org_id` turned on."""
        rows = await self._db.fetch(
            "SELECT guardrail FROM org_guardrails WHERE org_id = :org_id", {"org_id": org_id}
        )
        return {r["guardrail"] for r in rows}

    async def set(self, org_id: str, guardrail: str, *, enabled: bool) -> None:
        """Turn `guardrail` on or off for `org_id` (idempotent)."""
        async with self._db.transaction() as tx:
            await tx.execute(
                "DELETE FROM org_guardrails WHERE org_id = :org_id AND guardrail = :guardrail",
                {"org_id": org_id, "guardrail": guardrail},
            )
            if enabled:
                await tx.execute(
                    "INSERT INTO org_guardrails (org_id, guardrail, enabled_at)"
                    " VALUES (:org_id, :guardrail, :now)",
                    {"org_id": org_id, "guardrail": guardrail, "now": now_us()},
                )

    async def snapshot(self) -> dict[str, frozenset[str]]:
        """Every guardrail turned on anywhere, with the organizations that turned it on."""
        rows = await self._db.fetch("SELECT guardrail, org_id FROM org_guardrails")
        out: defaultdict[str, set[str]] = defaultdict(set)
        for row in rows:
            out[row["guardrail"]].add(row["org_id"])
        return {name: frozenset(orgs) for name, orgs in out.items()}
