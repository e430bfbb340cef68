"""Opening the keyring with the master key an instance (or a CLI command) was started with.

The first start on a database without a keyring creates it with `derive_pepper(master key)`,
the pepper every existing hash was made with, so nothing changes for existing API keys. From
then on the pepper comes from the keyring, whatever the master key is, and a master key that
is not the keyring's fails here, before anything is served, with a message naming both ids.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.errors import WrongMasterKey
from gateway.operations.metrics import Metrics
from protocol.credentials import derive_pepper
from protocol.errors import SecretBoxError
from protocol.keyring import key_id, open_pepper, seal_pepper
from protocol.timefmt import now_us
from storage.keyring import KeyringRepository

_START_WITH = "start with that key (GATEWAY_MASTER_KEY, or <data_dir>/master.key)"
_INTERRUPTED = (
    "if `gateway admin rotate-master-key` was interrupted, run it again with the same keys to"
    " finish"
)


@dataclass(frozen=True)
class Keyring:
    master_key_id: str
    pepper: bytes = field(repr=False)
    master_key_created_at: int  # µs


async def unlock(repo: KeyringRepository, master_key: bytes) -> Keyring:
    given = key_id(master_key)
    record = await repo.get()
    if record is None:
        record = await repo.create(given, seal_pepper(master_key, derive_pepper(master_key)))
    if record.master_key_id != given:
        if record.next_master_key_id == given:
            raise WrongMasterKey(
                f"the master key (id {given}) is the one an unfinished rotation goes to; the"
                f" database is still under key {record.master_key_id}: {_INTERRUPTED}"
            )
        raise WrongMasterKey(
            f"the master key (id {given}) is not the one this database's secrets are sealed"
            f" under (id {record.master_key_id}): {_START_WITH}; {_INTERRUPTED}"
        )
    try:
        pepper = open_pepper(master_key, record.pepper_sealed)
    except SecretBoxError:
        raise WrongMasterKey(
            f"the keyring's credential pepper does not open under the master key (id {given})"
            " although the ids match: the keyring row is damaged"
        ) from None
    return Keyring(given, pepper, record.master_key_created_at)


def register_age_gauge(
    metrics: Metrics, keyring: Keyring, clock: Callable[[], int] = now_us
) -> None:
    """`gateway_master_key_age_seconds`: since the key was made the keyring's (its first start
    with a keyring, or the rotation to it). Alert past ~90 days: rotation is quarterly."""

    def age() -> list[tuple[dict[str, str], float]]:
        return [({}, max(0, clock() - keyring.master_key_created_at) / 1e6)]

    metrics.gauge(
        "gateway_master_key_age_seconds",
        "Seconds since the master key in use became the database's (rotate quarterly).",
        age,
    )
