"""What the gateway keeps of its payment processor (migration 0023): each organization's
customer at the processor, and the processor's events already handled (a webhook delivered
twice changes the ledger once)."""

from __future__ import annotations

from protocol.timefmt import now_us
from storage.database import Database


class PaymentRecords:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def customer(self, org_id: str, provider: str) -> str | None:
        return await self._db.fetchval(  # type: ignore[no-any-return]
            "SELECT customer_id FROM payment_customers"
            " WHERE org_id = :org_id AND provider = :provider",
            {"org_id": org_id, "provider": provider},
        )

    async def keep_customer(self, org_id: str, provider: str, customer_id: str) -> str:
        """Record the org's customer unless one was recorded meanwhile (two instances made one
        each at once); answers the one that stays."""
        await self._db.execute(
            "INSERT INTO payment_customers (org_id, provider, customer_id, created_at)"
            " VALUES (:org_id, :provider, :customer_id, :now) ON CONFLICT DO NOTHING",
            {"org_id": org_id, "provider": provider, "customer_id": customer_id, "now": now_us()},
        )
        kept = await self.customer(org_id, provider)
        assert kept is not None
        return kept

    async def org_of(self, provider: str, customer_id: str) -> str | None:
        return await self._db.fetchval(  # type: ignore[no-any-return]
            "SELECT org_id FROM payment_customers"
            " WHERE provider = :provider AND customer_id = :customer_id",
            {"provider": provider, "customer_id": customer_id},
        )

    async def seen(self, event_id: str) -> bool:
        value = await self._db.fetchval(
            "SELECT 1 FROM payment_events WHERE id = :id", {"id": event_id}
        )
        return value is not None

    async def handled(self, event_id: str, type: str) -> None:
        """Mark the event handled (after its effects, each idempotent on its own)."""
        await self._db.execute(
            "INSERT INTO payment_events (id, type, received_at) VALUES (:id, :type, :now)"
            " ON CONFLICT DO NOTHING",
            {"id": event_id, "type": type, "now": now_us()},
        )
