"""Noticing that the master key this instance holds was rotated away (retired).

An instance reads the keyring at start (unlock.py) and keeps its master key in memory. Once
`gateway admin rotate-master-key` has finished, the keyring names another key: every value the
instance opens from then on fails, and every value it seals would be unreadable to the
instances with the new key. `KeyringWatch` finds that out

- every `interval` seconds (the actor `keyring-watch`, actors/keyring_watch.py,
  `[server] keyring_check_interval_s`), and
- at once when a value sealed under the master key does not open (`recheck_after_failure`,
  called where such a failure is caught: files, images, stored responses, provider keys),

and from then on, until the instance is restarted, `retired` is true, `/healthz` is 503 naming
the reason, and every use of a master-key box (`WatchedBox`: seal or open) raises
`master_key_rotated`, a 503 for the operator rather than a 500 `file_corrupt` or a "re-enter
your key" for the tenant. A retired key never becomes current again (a rotation back to it
would make a new keyring creation time), so the state is one-way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from protocol.errors import APIError
from protocol.keyring import key_id
from protocol.secretbox import SecretBox, derive_key
from storage.keyring import KeyringRepository

log = logging.getLogger("gateway.keyring")

RETRY_AFTER_S = 30  # the operator restarts instances; a client may retry (another instance)


def master_key_rotated(reason: str) -> APIError:
    return APIError(
        503,
        f"This gateway instance runs on a retired master key and must be restarted with the new"
        f" one: {reason}",
        type="server_error",
        code="master_key_rotated",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


class KeyringWatch:
    """Whether the keyring still names the master key this instance was started with."""

    def __init__(
        self,
        repo: KeyringRepository,
        master_key: bytes,
        *,
        on_retired: Callable[[], None] = lambda: None,
    ) -> None:
        self._repo = repo
        self.key_id = key_id(master_key)
        self.on_retired = on_retired
        self.retired = False
        self.reason: str | None = None  # set with `retired`: what the keyring says now
        self.checks = 0

    def statistics(self) -> dict[str, object]:
        return {"master_key_id": self.key_id, "retired": self.retired, "checks": self.checks}

    async def check(self) -> bool:
        """Read the keyring; True (and `retired` from now on) if it names another key."""
        if self.retired:
            return True
        self.checks += 1
        record = await self._repo.get()
        if record is None or record.master_key_id == self.key_id:
            return False  # (a rotation under way keeps this key current until it finishes)
        self.reason = (
            f"the database's secrets are now sealed under master key id {record.master_key_id};"
            f" this instance holds key id {self.key_id}"
        )
        self.retired = True
        log.error(
            "master key rotated: %s. Restart this instance with the new master key"
            " (GATEWAY_MASTER_KEY or <data_dir>/master.key)",
            self.reason,
        )
        self.on_retired()
        return True

    def require(self) -> None:
        """Raise `master_key_rotated` (503) once the key is retired."""
        if self.retired:
            raise master_key_rotated(self.reason or "")

    async def recheck(self) -> None:
        """After a value sealed under the master key did not open: if the keyring moved on,
        raise `master_key_rotated`, else return (the value itself is damaged)."""
        try:
            await self.check()
        except Exception:
            log.warning("the keyring could not be read after a failed decryption", exc_info=True)
        self.require()


class WatchedBox(SecretBox):
    """A master-key box that refuses to seal or open once its key is retired."""

    def __init__(self, master_key: bytes, purpose: str, watch: KeyringWatch) -> None:
        super().__init__(derive_key(master_key, purpose), purpose)
        self.watch = watch

    def seal(self, plaintext: str, context: Sequence[str]) -> str:
        self.watch.require()
        return super().seal(plaintext, context)

    def open(self, sealed: str, context: Sequence[str]) -> str:
        self.watch.require()
        return super().open(sealed, context)


async def recheck_after_failure(box: SecretBox) -> None:
    """Where a master-key box's open failed: raise `master_key_rotated` if that is why."""
    if isinstance(box, WatchedBox):
        await box.watch.recheck()
