"""Charges settled for requests still answering, waiting for each request's end so that its
`completion.*` event is written in the same transaction as its usage row (the accountant's
flush, storage/ledger.py `settle`): a crash then loses both or neither, never the event of a
billed request alone.

A request normally ends within moments of its charge (the rest of the body, a stream's last
frames). One that does not end within `LIMIT_S` (a client that stopped reading) has its charge
written without waiting longer; its event, when the request ends, goes to the event writer
(actors/event_writer.py) as an unbilled request's does.
"""

from __future__ import annotations

from collections.abc import Iterator

from actors.shared_holds import Settlement
from storage.ledger import UsageCharge

LIMIT_S = 1.0  # the longest a charge waits for its request's end (Trio clock seconds)

Waiting = tuple[UsageCharge, Settlement | None]


class AwaitingCharges:
    """By request id, in the order settled. A charge's Redis settlement (when it has one)
    waits with it: Redis is settled only after the database holds the row."""

    def __init__(self) -> None:
        self._by_request: dict[str, list[tuple[UsageCharge, Settlement | None, float]]] = {}

    def __len__(self) -> int:
        return sum(len(waiting) for waiting in self._by_request.values())

    def add(self, charge: UsageCharge, settlement: Settlement | None, now: float) -> None:
        self._by_request.setdefault(charge.request_id, []).append((charge, settlement, now))

    def pop(self, request_id: str) -> list[Waiting]:
        """The request's waiting charges (usually one, else none), no longer waiting."""
        return [(c, s) for c, s, _ in self._by_request.pop(request_id, ())]

    def take(self, *, waited_since: float | None) -> Iterator[Waiting]:
        """Stop waiting for the charges settled `LIMIT_S` or more before `waited_since` (all
        of them when None: a flush asked for explicitly, or the last one on stop)."""
        if not self._by_request:
            return
        for request_id in list(self._by_request):
            waiting = self._by_request[request_id]
            if waited_since is not None and waited_since - waiting[0][2] < LIMIT_S:
                break  # in the order settled: the rest are younger still
            del self._by_request[request_id]
            for charge, settlement, _ in waiting:
                yield charge, settlement
