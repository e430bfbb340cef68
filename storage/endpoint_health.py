"""The health of health-checked deployments, shared by every instance (docs/routing.md,
"Health checks"); migration 0018.

One row per deployment (model id, `<provider>/<upstream>`). One instance at a time holds its
lease (`lease_owner` until `lease_expires_at`, wall-clock microseconds), runs the check and
writes the outcome with `record`; every instance reads `healthy` (`get`) to take the
deployment out of, or back into, its balancer's rotation. A transition (healthy to unhealthy
after `unhealthy_after` consecutive failures, back after `healthy_after` consecutive successes)
writes its `endpoint.unhealthy` / `endpoint.recovered` events in the same transaction as the
state, as the lease holder only: written once, however many instances run.

Who receives them: an endpoint is the instance's, not an organization's, so an event row is
written for each organization with an enabled webhook subscription that names the type
explicitly (`["*"]` alone does not opt in; docs/decisions.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from protocol.timefmt import to_iso
from storage import events
from storage.database import Database, Executor, Row

UNHEALTHY = "endpoint.unhealthy"
RECOVERED = "endpoint.recovered"

_COLUMNS = (
    "model, deployment, healthy, consecutive_failures, consecutive_successes, since,"
    " last_error, last_checked_at, lease_owner, lease_expires_at"
)
_KEY = "model = :model AND deployment = :deployment"


@dataclass(frozen=True, slots=True)
class EndpointHealth:
    model: str
    deployment: str  # `<provider>/<upstream>`
    healthy: bool
    consecutive_failures: int
    consecutive_successes: int
    since: int  # when the current state began (wall-clock µs)
    last_error: str | None
    last_checked_at: int | None
    lease_owner: str | None
    lease_expires_at: int | None


@dataclass(frozen=True, slots=True)
class Endpoint:
    """What the events say of a deployment: plain values (no configuration types here)."""

    model: str
    provider: str
    upstream: str
    host: str  # the provider base URL's host

    @property
    def deployment(self) -> str:
        return f"{self.provider}/{self.upstream}"


def unhealthy_data(endpoint: Endpoint, state: EndpointHealth) -> dict[str, Any]:
    """`endpoint.unhealthy`'s `data` (the fields are fixed by contract)."""
    return {
        "model": endpoint.model,
        "provider": endpoint.provider,
        "upstream": endpoint.upstream,
        "host": endpoint.host,
        "consecutive_failures": state.consecutive_failures,
        "last_error": state.last_error or "",
        "since": to_iso(state.since),
    }


def recovered_data(
    endpoint: Endpoint, state: EndpointHealth, unhealthy_since: int
) -> dict[str, Any]:
    """`endpoint.recovered`'s `data`."""
    return {
        "model": endpoint.model,
        "provider": endpoint.provider,
        "upstream": endpoint.upstream,
        "host": endpoint.host,
        "consecutive_successes": state.consecutive_successes,
        "unhealthy_since": to_iso(unhealthy_since),
        "since": to_iso(state.since),
    }


def _of(row: Row) -> EndpointHealth:
    return EndpointHealth(
        model=row["model"],
        deployment=row["deployment"],
        healthy=bool(row["healthy"]),
        consecutive_failures=int(row["consecutive_failures"]),
        consecutive_successes=int(row["consecutive_successes"]),
        since=int(row["since"]),
        last_error=row["last_error"],
        last_checked_at=None if row["last_checked_at"] is None else int(row["last_checked_at"]),
        lease_owner=row["lease_owner"],
        lease_expires_at=None if row["lease_expires_at"] is None else int(row["lease_expires_at"]),
    )


class EndpointHealthRepository:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def ensure(self, model: str, deployment: str, now: int) -> None:
        """The deployment's row, healthy, unless it exists (a restart keeps what was known)."""
        await self._db.execute(
            "INSERT INTO endpoint_health (model, deployment, healthy, consecutive_failures,"
            " consecutive_successes, since, updated_at)"
            " VALUES (:model, :deployment, :yes, 0, 0, :now, :now)"
            " ON CONFLICT (model, deployment) DO NOTHING",
            {"model": model, "deployment": deployment, "yes": True, "now": now},
        )

    async def get(self, model: str, deployment: str) -> EndpointHealth | None:
        row = await self._db.fetchrow(
            f"SELECT {_COLUMNS} FROM endpoint_health WHERE {_KEY}",
            {"model": model, "deployment": deployment},
        )
        return None if row is None else _of(row)

    async def claim(self, model: str, deployment: str, owner: str, now: int, ttl_us: int) -> bool:
        """Take or renew the lease to check it; False while another owner holds one."""
        changed = await self._db.execute(
            "UPDATE endpoint_health SET lease_owner = :owner, lease_expires_at = :expires"
            f" WHERE {_KEY} AND (lease_owner IS NULL OR lease_owner = :owner"
            " OR lease_expires_at <= :now)",
            {
                "owner": owner,
                "expires": now + ttl_us,
                "model": model,
                "deployment": deployment,
                "now": now,
            },
        )
        return changed == 1

    async def release(self, model: str, deployment: str, owner: str) -> None:
        await self._db.execute(
            "UPDATE endpoint_health SET lease_owner = NULL, lease_expires_at = NULL"
            f" WHERE {_KEY} AND lease_owner = :owner",
            {"model": model, "deployment": deployment, "owner": owner},
        )

    async def record(
        self,
        endpoint: Endpoint,
        owner: str,
        now: int,
        *,
        error: str | None,
        unhealthy_after: int,
        healthy_after: int,
    ) -> tuple[EndpointHealth, str | None] | None:
        """Count one check's outcome (`error` None: it succeeded) as the lease holder, and on a
        transition write its events, all in one transaction. Returns the new state and the
        event type written (None: no transition); None when the lease is not held (nothing
        written)."""
        key = {"model": endpoint.model, "deployment": endpoint.deployment}
        async with self._db.transaction() as tx:
            # The lease check and the row lock in one: a second holder (an expired lease taken
            # over meanwhile) cannot interleave its own transition.
            row = await tx.fetchrow(
                "UPDATE endpoint_health SET updated_at = :now"
                f" WHERE {_KEY} AND lease_owner = :owner AND lease_expires_at > :now"
                f" RETURNING {_COLUMNS}",
                {**key, "owner": owner, "now": now},
            )
            if row is None:
                return None
            old = _of(row)
            healthy, since = old.healthy, old.since
            if error is None:
                failures, successes, last_error = 0, old.consecutive_successes + 1, old.last_error
                if not healthy and successes >= healthy_after:
                    healthy, since = True, now
            else:
                failures, successes, last_error = old.consecutive_failures + 1, 0, error
                if healthy and failures >= unhealthy_after:
                    healthy, since = False, now
            await tx.execute(
                "UPDATE endpoint_health SET healthy = :healthy, consecutive_failures = :f,"
                " consecutive_successes = :s, since = :since, last_error = :error,"
                f" last_checked_at = :now, updated_at = :now WHERE {_KEY}",
                {
                    **key,
                    "healthy": healthy,
                    "f": failures,
                    "s": successes,
                    "since": since,
                    "error": last_error,
                    "now": now,
                },
            )
            state = EndpointHealth(
                old.model,
                old.deployment,
                healthy,
                failures,
                successes,
                since,
                last_error,
                now,
                old.lease_owner,
                old.lease_expires_at,
            )
            if healthy == old.healthy:
                return state, None
            if healthy:
                event_type, data = RECOVERED, recovered_data(endpoint, state, old.since)
            else:
                event_type, data = UNHEALTHY, unhealthy_data(endpoint, state)
            for org_id in await subscribers(tx, event_type):
                await events.append(tx, org_id, event_type, data)
        return state, event_type


async def subscribers(tx: Executor, event_type: str) -> list[str]:
    """The organizations with an enabled subscription whose `events` name `event_type` itself
    (not through `*`), in id order."""
    rows = await tx.fetch(
        "SELECT org_id, events FROM webhooks WHERE enabled = :yes AND events LIKE :pattern"
        " ORDER BY org_id",
        {"yes": True, "pattern": f'%"{event_type}"%'},
    )
    orgs = [r["org_id"] for r in rows if event_type in json.loads(r["events"])]
    return list(dict.fromkeys(orgs))
