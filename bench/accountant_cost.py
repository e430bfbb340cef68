"""CPU cost of the accountant's hot path per request: reserve + settle, in-process SQLite.

    python -m bench.accountant_cost [N]

Three ways, best of three runs of N (default 10,000) requests, in µs of CPU each:

- `direct`: what gateway/inference does, `reserve_now` (no I/O, no await) else `reserve`;
- `reserve`: always `await accountant.reserve(...)`, which the running accountant answers
  through its inbox, one task per request (actors/asking.py): the path of a reservation that
  needs I/O, here without the I/O;
- `inbox`: the bare round trip, asked through an `Inbox` with a `Reply` (`ask`) of a loop
  that answers with `reserve_now` in its own task.

Usage writes are kept out of the measure (a flush interval of an hour, written at the end).
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import trio

from actors.accountant import Accountant, Reservation
from actors.inbox import Inbox, Reply, ask
from protocol.billing import TOPUP
from protocol.ids import ordered_id
from protocol.timefmt import now_us
from storage.ledger import UsageCharge
from storage.open import open_storage


@dataclass
class Reserve:
    org_id: str
    micros: int
    reply: Reply[Reservation]


def _charge(org_id: str, micros: int) -> UsageCharge:
    now = now_us()
    return UsageCharge(ordered_id("txn", now), org_id, None, "m", "req_1", micros, "chat", now)


async def _answer(acc: Accountant, inbox: Inbox[Reserve]) -> None:
    async for msg in inbox:
        reservation = acc.reserve_now(msg.org_id, msg.micros)
        if reservation is None:
            reservation = await acc.reserve(msg.org_id, msg.micros)
        msg.reply.set(reservation)


async def _measure(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        async with open_storage(f"sqlite:///{Path(tmp) / 'b.db'}") as storage:
            org = (await storage.orgs.create("bench")).id
            await storage.ledger.apply(org, TOPUP, 10**15, "top-up")
            acc = Accountant(storage.ledger, storage.orgs, flush_interval_s=3600, batch_size=10**9)
            inbox: Inbox[Reserve] = Inbox(4096, name="accountant")
            out: dict[str, float] = {}
            async with trio.open_nursery() as nursery:
                await nursery.start(acc.run)
                nursery.start_soon(_answer, acc, inbox)
                await acc.reserve(org, 1)  # load the view
                for way in ("direct", "reserve", "inbox"):
                    best = float("inf")
                    for _ in range(3):
                        start = time.process_time()
                        for _ in range(n):
                            if way == "direct":
                                r = acc.reserve_now(org, 100) or await acc.reserve(org, 100)
                            elif way == "reserve":
                                r = await acc.reserve(org, 100)
                            else:
                                r = await ask(inbox, lambda reply: Reserve(org, 100, reply))
                            acc.settle(r, _charge(org, 90))
                        best = min(best, time.process_time() - start)
                        await acc.flush()
                    out[way] = best / n * 1e6
                nursery.cancel_scope.cancel()
            return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    for way, us in trio.run(_measure, n).items():
        print(f"{way:8} {us:6.2f} µs CPU per reserve + settle")


if __name__ == "__main__":
    main()
