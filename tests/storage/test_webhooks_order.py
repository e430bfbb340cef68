"""PostgreSQL: the outbox is read in `(txid, seq)` order behind the horizon of running
transactions (storage/webhooks/, "Order"), so an event that commits late is never skipped.

Transaction A writes first (the lower seq and the lower txid) and stays open; B writes an event
for the same org and commits. Reading by `seq` alone would queue B's event and move the cursor
past A's, which A then commits behind it. Two transactions at once need two connections: two
databases opened on the same URL."""

from __future__ import annotations

import pytest

from protocol.ids import new_id
from storage import events
from storage.migrate import migrate
from storage.open import Storage, open_database
from storage.webhooks import NewWebhook
from tests.backends import POSTGRES_URL
from tests.storage import webhooks_support as ws

pytestmark = [
    pytest.mark.skipif(POSTGRES_URL is None, reason="needs GATEWAY_TEST_DATABASE_URL"),
    pytest.mark.parametrize("backend", ["postgresql"]),
]

T0 = 1_700_000_000_000_000
TTL = 15_000_000


async def test_a_transaction_still_running_holds_back_later_events(database_url: str) -> None:
    async with open_database(database_url) as db, open_database(database_url) as other:
        await migrate(db)
        storage = Storage.over(db)
        org = await storage.orgs.create("acme")
        new = NewWebhook(
            new_id("whk"), org.id, "https://example.com/", ("*",), None, True, "s", "h"
        )
        hook = await storage.webhooks.create(new, T0)
        wh = storage.webhooks
        assert await wh.claim(hook.id, "a", T0, TTL)
        start = await wh.outbox_head()

        async with other.transaction() as tx_a:
            a = await events.append(tx_a, org.id, "key.created", {"n": "a"})
            async with db.transaction() as tx_b:
                b = await events.append(tx_b, org.id, "key.deleted", {"n": "b"})
            visible = await db.fetch("SELECT id FROM events WHERE org_id = :o", {"o": org.id})
            assert [r["id"] for r in visible] == [b]  # A's row is not visible yet; B's is
            # B is committed and visible, but behind the horizon A holds: nothing is read.
            assert await wh.fill_queue(hook.id, "a", T0, limit=10) == 0
            assert await wh.head(hook.id) is None
            assert await wh.outbox_head() == start
            assert await wh.orgs_with_events_after(start, limit=10) == (set(), start)

        await ws.readable(storage)
        assert await wh.fill_queue(hook.id, "a", T0, limit=10) == 2
        page = await wh.deliveries(org.id, hook.id, limit=10, after=None)
        assert [d.event_id for d, _ in reversed(page.items)] == [a, b]
        rows = await db.fetch(
            "SELECT id, txid, seq FROM events WHERE org_id = :o ORDER BY seq", {"o": org.id}
        )
        assert [r["id"] for r in rows] == [a, b]  # A took the lower seq and txid
        assert rows[0]["txid"] < rows[1]["txid"]
        orgs, position = await wh.orgs_with_events_after(start, limit=10)
        assert orgs == {org.id} and position == (rows[1]["txid"], rows[1]["seq"])
        assert position == await wh.outbox_head()
