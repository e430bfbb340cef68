"""Master-key rotation: every sealed value and the keyring re-sealed under a new master key.

Content is never touched: provider keys and webhook secrets are re-sealed (same plaintext), a
file's data key is re-wrapped and its blob, encrypted under that data key, stays as it is.

Steps, each safe to interrupt and run again with the same two keys:

1. The keyring is marked (`next_master_key_id`): the rotation is under way, to that key. A later
   run to a different key is refused until this one is finished, so no row can end up under a
   key that is then lost. The keyring, and with it the pepper, stays under the current key.
2. Each table's sealed columns, in id order, a batch per transaction: a value that already
   opens under the new key is left (done by an interrupted run), one that opens under the
   current key is re-sealed, written only if the row still holds what was read (an instance
   may change it meanwhile: the batch is read again in a later pass). A value neither key opens
   is left as it was and reported (it was unreadable already).
3. One conditional update puts the keyring under the new key: the pepper re-sealed, the new
   key's id, `master_key_created_at` now. Only then does the new key open the keyring (and
   `gateway serve` start with it); the old one is refused from here on.

Run again after step 3 with the same keys, it re-seals only what is still under the old key:
the secrets that instances still running with the old key wrote after the rotation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.errors import RotationError
from gateway.keyring.unlock import unlock
from protocol.errors import SecretBoxError
from protocol.keyring import key_id, reseal, seal_pepper
from protocol.secretbox import SecretBox
from protocol.timefmt import now_us
from storage.database import Row
from storage.keyring import SEALED_COLUMNS, KeyringRepository, SealedColumns

_BATCH = 500
_PASSES = 5  # rows changed by instances while a pass ran are read again, this many times


@dataclass
class RotationReport:
    resealed: dict[str, int] = field(default_factory=dict)  # table -> values re-sealed
    unreadable: dict[str, list[str]] = field(default_factory=dict)  # table -> row ids
    finished_earlier: bool = False  # the keyring was under the new key already: a sweep


async def rotate_master_key(
    repo: KeyringRepository,
    current: bytes,
    new: bytes,
    *,
    batch: int = _BATCH,
    clock: Callable[[], int] = now_us,
) -> RotationReport:
    """Everything sealed under `current` re-sealed under `new` (see the module docstring)."""
    current_id, new_id = key_id(current), key_id(new)
    if current_id == new_id:
        raise RotationError("the new master key is the current one")
    record = await repo.get()
    report = RotationReport()
    if record is not None and record.master_key_id == new_id:
        report.finished_earlier = True
        pepper = None
    else:
        pepper = (await unlock(repo, current)).pepper  # WrongMasterKey if `current` is not it
        record = await repo.get()
        assert record is not None
        pending = record.next_master_key_id
        if pending not in (None, new_id):
            raise RotationError(
                f"a rotation to another master key (id {pending}) was started and not finished:"
                " run the command again with that key as GATEWAY_NEW_MASTER_KEY"
            )
        if not await repo.begin_rotation(current_id, new_id):
            raise RotationError("the keyring changed while the rotation started: run it again")
    for spec in SEALED_COLUMNS:
        resealed, unreadable = await _reseal_table(repo, spec, current, new, batch)
        report.resealed[spec.table] = resealed
        if unreadable:
            report.unreadable[spec.table] = unreadable
    if pepper is not None:
        sealed = seal_pepper(new, pepper)
        if not await repo.finish_rotation(current_id, new_id, sealed, clock()):
            raise RotationError("the keyring changed during the rotation: run it again")
    return report


async def _reseal_table(
    repo: KeyringRepository, spec: SealedColumns, current: bytes, new: bytes, batch: int
) -> tuple[int, list[str]]:
    """Values re-sealed, and the ids of rows holding a value neither key opens."""
    old_box = SecretBox.for_purpose(current, spec.purpose)
    new_box = SecretBox.for_purpose(new, spec.purpose)
    resealed = 0
    for _ in range(_PASSES):
        unreadable: list[str] = []
        conflicts = 0
        after = ""
        while rows := await repo.sealed_rows(spec, after, batch):
            after = str(rows[-1]["id"])
            changes: list[tuple[Row, Row]] = []
            for row in rows:
                changed, ok = _reseal_row(spec, row, old_box, new_box)
                if not ok:
                    unreadable.append(str(row["id"]))
                if changed is not None:
                    changes.append((row, changed))
            if changes:
                skipped = await repo.replace_sealed(spec, changes)
                conflicts += len(skipped)
                resealed += sum(
                    sum(1 for c in spec.columns if before[c] != after_row[c])
                    for before, after_row in changes
                    if str(before["id"]) not in skipped
                )
        if not conflicts:
            return resealed, unreadable
    raise RotationError(
        f"{spec.table}: rows kept changing while they were re-sealed: run the command again"
    )


def _reseal_row(
    spec: SealedColumns, row: Row, old_box: SecretBox, new_box: SecretBox
) -> tuple[Row | None, bool]:
    """The row's sealed columns re-sealed (None if none needed it), and whether every value
    opened under one key or the other."""
    context = [str(row[c]) for c in spec.context]
    out: Row = {}
    changed = False
    readable = True
    for column in spec.columns:
        value = row[column]
        out[column] = value
        if value is None:
            continue
        try:
            again = reseal(old_box, new_box, value, context)
        except SecretBoxError:
            readable = False
            continue
        if again is not None:
            out[column] = again
            changed = True
    return (out if changed else None), readable
