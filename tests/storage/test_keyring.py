"""The keyring row, and the list of sealed columns a master-key rotation goes through."""

from __future__ import annotations

from storage.database import Database
from storage.keyring import SEALED_COLUMNS
from storage.open import Storage


async def _columns(db: Database) -> dict[str, set[str]]:
    if db.dialect == "sqlite":
        tables = [
            r["name"] for r in await db.fetch("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        return {
            t: {r["name"] for r in await db.fetch(f"SELECT name FROM pragma_table_info('{t}')")}
            for t in tables
        }
    out: dict[str, set[str]] = {}
    for r in await db.fetch(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema()"
    ):
        out.setdefault(r["table_name"], set()).add(r["column_name"])
    return out


async def test_every_sealed_column_of_the_schema_is_rotated(storage: Storage) -> None:
    columns = await _columns(storage.db)
    sealed = {
        (table, column)
        for table, names in columns.items()
        for column in names
        if "sealed" in column and table != "keyring"
    }
    listed = {(spec.table, column) for spec in SEALED_COLUMNS for column in spec.columns}
    assert sealed == listed
    for spec in SEALED_COLUMNS:  # and the context columns exist
        assert {"id", *spec.context} <= columns[spec.table]


async def test_first_keyring_wins_and_rotation_marks_are_conditional(storage: Storage) -> None:
    repo = storage.keyring
    assert await repo.get() is None
    first = await repo.create("aaaa", "v1:first")
    again = await repo.create("bbbb", "v1:second")  # another instance, a moment later
    assert again == first and first.master_key_id == "aaaa"
    assert "first" not in repr(first)
    assert not await repo.begin_rotation("bbbb", "cccc")  # not the keyring's key
    assert await repo.begin_rotation("aaaa", "cccc")
    assert await repo.begin_rotation("aaaa", "cccc")  # a re-run of the same rotation
    assert not await repo.begin_rotation("aaaa", "dddd")  # another one is under way
    assert not await repo.finish_rotation("aaaa", "dddd", "v1:x", 5)
    assert await repo.finish_rotation("aaaa", "cccc", "v1:third", 5)
    done = await repo.get()
    assert done is not None
    assert (done.master_key_id, done.pepper_sealed, done.master_key_created_at) == (
        "cccc",
        "v1:third",
        5,
    )
    assert done.next_master_key_id is None and done.rotation_started_at is None


async def test_a_row_changed_since_it_was_read_is_left_alone(storage: Storage) -> None:
    org = await storage.orgs.create("o")
    await storage.provider_keys.put(org.id, "openai", "v1:as-read", "hint")
    await storage.provider_keys.put(org.id, "anthropic", "v1:b", "hint")
    spec = next(s for s in SEALED_COLUMNS if s.table == "provider_keys")
    first, second = await storage.keyring.sealed_rows(spec, "", 10)
    assert await storage.keyring.sealed_rows(spec, first["id"], 10) == [second]
    # An instance replaces the first key after the rotation read it.
    changed = first["provider"]
    await storage.provider_keys.put(org.id, changed, "v1:put-meanwhile", "hint")
    skipped = await storage.keyring.replace_sealed(
        spec,
        [(first, {"sealed_key": "v1:resealed-1"}), (second, {"sealed_key": "v1:resealed-2"})],
    )
    assert skipped == [first["id"]]
    rows = {r["id"]: r["sealed_key"] for r in await storage.keyring.sealed_rows(spec, "", 10)}
    assert rows == {first["id"]: "v1:put-meanwhile", second["id"]: "v1:resealed-2"}
