"""A usage charge as the billing path makes one (`gateway/inference/billing.py`, Bill.charge)."""

from __future__ import annotations

from protocol.ids import ordered_id
from protocol.timefmt import now_us
from storage.ledger import UsageCharge


def usage_charge(org_id: str, micros: int, key_id: str | None = None) -> UsageCharge:
    now = now_us()
    return UsageCharge(ordered_id("txn", now), org_id, key_id, "m", "req_1", micros, "chat", now)
