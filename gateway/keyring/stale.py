"""A master key rotated while this instance runs: noticed, reported, and refused where it
matters, until the instance is restarted with the new key.

`gateway admin rotate-master-key` re-seals every secret under the new key and moves the keyring
to it; an instance started before still holds the old key in memory. Everything it would open
then fails (a file's data key: "failed its integrity check"; a provider key: "re-enter your
key"), and everything it would seal is written under a key the database no longer has. So:

- `KeyringWatcher` reads the keyring row (the one `unlock` checks at start) every
  `interval` seconds; once its key id is not this instance's, it marks the `MasterKeyState`
  rotated, logs an error for the operator, sets a readiness reason (`/readyz` 503) and retires.
  A database that does not answer changes nothing here (the next poll tries again).
- `requiring_master_key(routes, state)`: the API areas that seal or open secrets answer
  503 `master_key_rotated` (Retry-After) instead of running, with a reason meant for the
  operator; `guarded_box`: a SecretBox that does the same before any seal or open (the
  bring-your-own-key resolver of inference, so only requests that need an org's own key fail).

There is no way back but a restart: the new key is not known to this process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

import trio

from actors.base import Actor
from gateway.web import Request, Response, Routes, StreamResponse
from gateway.web.routing import Handler, Route
from protocol.errors import APIError
from protocol.keyring import key_id
from protocol.secretbox import SecretBox, derive_key
from storage.errors import StorageError
from storage.keyring import KeyringRepository

log = logging.getLogger("gateway.secrets")
RETRY_AFTER_S = "5"  # another instance (restarted already) may serve it meanwhile


class MasterKeyState:
    """Whether the database's master key is still the one this process holds."""

    def __init__(self, master_key: bytes) -> None:
        self.key_id = key_id(master_key)
        self.rotated_to: str | None = None  # the database's key id, once it is another

    def check(self) -> None:
        """Raise the 503 `master_key_rotated` if the key was rotated under this instance."""
        if self.rotated_to is not None:
            raise master_key_rotated()


def master_key_rotated() -> APIError:
    return APIError(
        503,
        "This gateway instance still runs on a master key that has been rotated; it cannot"
        " open or seal stored secrets until an operator restarts it with the new key. Retry"
        " shortly (another instance may serve the request).",
        type="server_error",
        code="master_key_rotated",
        headers={"Retry-After": RETRY_AFTER_S},
    )


class KeyringWatcher(Actor):
    def __init__(
        self,
        repo: KeyringRepository,
        state: MasterKeyState,
        on_rotated: Callable[[str], None],
        *,
        interval: float = 5.0,
    ) -> None:
        self.name = "keyring-watcher"
        self._repo = repo
        self._state = state
        self._on_rotated = on_rotated
        self._interval = interval

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            try:
                record = await self._repo.get()
            except StorageError:  # the database is away: nothing learnt, try again later
                record = None
            if record is not None and record.master_key_id != self._state.key_id:
                self._state.rotated_to = record.master_key_id
                detail = (
                    f"the master key was rotated (this instance holds key {self._state.key_id},"
                    f" the database is under {record.master_key_id}): restart it with the new key"
                )
                log.error("master key: %s", detail)
                self._on_rotated(detail)
                return  # retired: only a restart brings the new key
            await trio.sleep(self._interval)

    def statistics(self) -> dict[str, object]:
        return {"key_id": self._state.key_id, "rotated_to": self._state.rotated_to}


def requiring_master_key(routes: Routes, state: MasterKeyState) -> Routes:
    """`routes` whose handlers first check that the master key was not rotated."""
    guarded = Routes()
    for route in routes:
        if isinstance(route, Route):
            guarded.routes.append(replace(route, handler=_guarded(route.handler, state)))
        else:
            guarded.routes.append(route)
    return guarded


def _guarded(handler: Handler, state: MasterKeyState) -> Handler:
    async def guarded(request: Request) -> Response | StreamResponse | None:
        state.check()
        return await handler(request)

    return guarded


class _GuardedBox(SecretBox):
    state: MasterKeyState

    def seal(self, plaintext: str, context: Sequence[str]) -> str:
        self.state.check()
        return super().seal(plaintext, context)

    def open(self, sealed: str, context: Sequence[str]) -> str:
        self.state.check()
        return super().open(sealed, context)


def guarded_box(master_key: bytes, purpose: str, state: MasterKeyState) -> SecretBox:
    """SecretBox.for_purpose whose seal and open raise `master_key_rotated` once rotated."""
    box = _GuardedBox(derive_key(master_key, purpose), purpose)
    box.state = state
    return box
