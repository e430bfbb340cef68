"""Idempotency keys: the first request with a key claims it; retries see what became of it.

Claims are single autocommitted statements (an INSERT that a unique key makes exclusive), so
two instances racing on one key cannot both win. An expired claim is replaced on the next use.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.database import Database
from storage.errors import UniqueViolation

IN_PROGRESS = "in_progress"
COMPLETED = "completed"  # a JSON response is stored and replayed
STREAMED = "streamed"  # a stream ran (to its end or until the client left): not replayable


@dataclass(frozen=True, slots=True)
class Claim:
    won: bool  # this request owns the key now
    state: str | None = None  # when not won: the holder's state
    same_request: bool = True  # when not won: the holder had the same body
    response: str | None = None  # when COMPLETED: the response to replay


class IdempotencyRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def claim(
        self, org_id: str, key: str, fingerprint: str, *, now_us: int, ttl_us: int
    ) -> Claim:
        params = {"org_id": org_id, "key": key}
        await self._db.execute(
            "DELETE FROM idempotency_keys WHERE org_id = :org_id AND key = :key"
            " AND expires_at <= :now",
            {**params, "now": now_us},
        )
        try:
            await self._db.execute(
                "INSERT INTO idempotency_keys"
                " (org_id, key, fingerprint, state, created_at, expires_at)"
                " VALUES (:org_id, :key, :fingerprint, :state, :now, :expires)",
                {
                    **params,
                    "fingerprint": fingerprint,
                    "state": IN_PROGRESS,
                    "now": now_us,
                    "expires": now_us + ttl_us,
                },
            )
            return Claim(won=True)
        except UniqueViolation:
            pass
        row = await self._db.fetchrow(
            "SELECT fingerprint, state, response FROM idempotency_keys"
            " WHERE org_id = :org_id AND key = :key",
            params,
        )
        if row is None:  # released between our insert and read: the caller may retry
            return Claim(won=False, state=IN_PROGRESS)
        return Claim(
            won=False,
            state=row["state"],
            same_request=row["fingerprint"] == fingerprint,
            response=row["response"],
        )

    async def finish(
        self,
        org_id: str,
        key: str,
        state: str,
        response: str | None,
        *,
        expires_us: int | None = None,
    ) -> None:
        """Record the outcome; with `expires_us`, keep it until then (a claim may have been
        taken with a short time to live while in progress)."""
        params = {"org_id": org_id, "key": key, "state": state, "response": response}
        if expires_us is None:
            await self._db.execute(
                "UPDATE idempotency_keys SET state = :state, response = :response"
                " WHERE org_id = :org_id AND key = :key",
                params,
            )
            return
        await self._db.execute(
            "UPDATE idempotency_keys SET state = :state, response = :response,"
            " expires_at = :expires WHERE org_id = :org_id AND key = :key",
            {**params, "expires": expires_us},
        )

    async def release(self, org_id: str, key: str) -> None:
        """Forget a claim whose request failed, so that a retry runs."""
        await self._db.execute(
            "DELETE FROM idempotency_keys WHERE org_id = :org_id AND key = :key",
            {"org_id": org_id, "key": key},
        )
