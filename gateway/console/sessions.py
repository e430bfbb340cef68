"""Console sessions: a random id in an HttpOnly cookie, everything else in the database.

Stored in `console_sessions` (storage/console_sessions.py), so every instance and worker on the
database knows a session and a restart keeps it. The row is found by the id's SHA-256: the
table alone signs nobody in. The credential itself is never kept: an organization's session
keeps the hash its management key is stored under, an operator's the fingerprint of the
operator key it used, and each request checks that key was not revoked or removed since
(gateway/console/app.py).

The CSRF token is not stored: it is an HMAC of the session id, so only a holder of the cookie
(the browser, and the pages it was sent) has it. The flash messages of an action (a new key's
secret among them) cross to the next page through the row, sealed (AES-GCM, protocol/secretbox)
under another key derived from the session id: the database holds them only in a form that
its reader cannot open, and only until the next page shows them.

A session ends after `idle_s` without a request or `max_age_s` after sign-in, whichever comes
first; both are checked on every read, and each sign-in deletes the rows past them. Times are
the wall clock (instances compare each other's). The last-seen time is written at most every
`touch_s`, not on every page.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from protocol.errors import SecretBoxError
from protocol.secretbox import SecretBox
from storage.console_sessions import ConsoleSessionRepository, StoredSession

IDLE_S = 8 * 3600.0
MAX_AGE_S = 24 * 3600.0
TOUCH_S = 60.0  # the stored last-seen time lags by less (idle expiry up to that much early)
_MAX_ID = 128
_FLASH_PURPOSE = "console-flash"
_SWAP_TRIES = 8

Flash = list[tuple[str, str]]  # (kind, text), shown once


@dataclass
class Session:
    """Who signed in: the operator (every org) or one organization's management key."""

    operator: bool
    org_id: str | None  # None for the operator
    key_hash: str | None  # the management key's stored hash (an org session)
    label: str  # shown in the header: "operator" or the org's name
    operator_key: str | None = None  # the operator key's fingerprint (an operator session)
    csrf: str = ""  # set from the id when the session is created or read
    flash: Flash = field(default_factory=list)  # as read with the session
    flash_box: str = field(default="", repr=False)  # its sealed form, for compare-and-set


class SessionStore:
    def __init__(
        self,
        repository: ConsoleSessionRepository,
        *,
        idle_s: float = IDLE_S,
        max_age_s: float = MAX_AGE_S,
        touch_s: float = TOUCH_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._repo = repository
        self._idle_us = int(idle_s * 1e6)
        self._max_age_us = int(max_age_s * 1e6)
        self._touch_us = int(touch_s * 1e6)
        self._clock = clock

    def _now(self) -> int:
        return int(self._clock() * 1e6)

    async def create(self, session: Session) -> str:
        """Store `session` (and delete the expired ones); returns the id to put in the
        cookie."""
        now = self._now()
        await self._repo.purge(
            seen_before=now - self._idle_us, created_before=now - self._max_age_us
        )
        session_id = secrets.token_urlsafe(32)
        await self._repo.create(
            StoredSession(
                id_hash=_digest(session_id),
                operator_key=session.operator_key if session.operator else None,
                org_id=session.org_id,
                key_hash=session.key_hash,
                label=session.label,
                flash_box="",
                created_at=now,
                seen_at=now,
            )
        )
        session.csrf = csrf_token(session_id)
        session.flash, session.flash_box = [], ""
        return session_id

    async def get(self, session_id: str | None) -> Session | None:
        """The live session of that id (its idle clock restarted), or None."""
        if not session_id or len(session_id) > _MAX_ID:
            return None
        id_hash = _digest(session_id)
        stored = await self._repo.get(id_hash)
        if stored is None:
            return None
        now = self._now()
        if now - stored.seen_at > self._idle_us or now - stored.created_at > self._max_age_us:
            await self._repo.end(id_hash)
            return None
        if now - stored.seen_at >= self._touch_us:
            await self._repo.touch(id_hash, now, unless_since=now - self._touch_us)
        return Session(
            operator=stored.operator_key is not None,
            org_id=stored.org_id,
            key_hash=stored.key_hash,
            label=stored.label,
            operator_key=stored.operator_key,
            csrf=csrf_token(session_id),
            flash=_open_flash(session_id, stored.flash_box),
            flash_box=stored.flash_box,
        )

    async def end(self, session_id: str | None) -> None:
        if session_id and len(session_id) <= _MAX_ID:
            await self._repo.end(_digest(session_id))

    async def add_flash(self, session_id: str, session: Session, kind: str, text: str) -> None:
        """Keep a message for the session's next page (whichever instance serves it)."""
        for _ in range(_SWAP_TRIES):
            flash = [*session.flash, (kind, text)]
            box = _seal_flash(session_id, flash)
            if await self._repo.swap_flash(_digest(session_id), session.flash_box, box):
                session.flash, session.flash_box = flash, box
                return
            if not await self._reread_flash(session_id, session):
                return  # the session ended meanwhile
        raise RuntimeError("the console session's messages kept changing")

    async def take_flash(self, session_id: str, session: Session) -> Flash:
        """The messages kept for this page, dropped from the session (shown once)."""
        for _ in range(_SWAP_TRIES):
            if not session.flash_box:
                return []
            if await self._repo.swap_flash(_digest(session_id), session.flash_box, ""):
                taken, session.flash, session.flash_box = session.flash, [], ""
                return taken
            if not await self._reread_flash(session_id, session):
                return []
        raise RuntimeError("the console session's messages kept changing")

    async def _reread_flash(self, session_id: str, session: Session) -> bool:
        stored = await self._repo.get(_digest(session_id))
        if stored is None:
            return False
        session.flash = _open_flash(session_id, stored.flash_box)
        session.flash_box = stored.flash_box
        return True


def csrf_token(session_id: str) -> str:
    """The session's CSRF token: HMAC-SHA256 keyed by the id, so it is never stored and does
    not reveal the id."""
    mac = hmac.new(_id_bytes(session_id), b"gateway-console-csrf", hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def _flash_box(session_id: str) -> SecretBox:
    key = hmac.new(_id_bytes(session_id), b"gateway-console-flash", hashlib.sha256).digest()
    return SecretBox(key, _FLASH_PURPOSE)


def _seal_flash(session_id: str, flash: Flash) -> str:
    if not flash:
        return ""
    return _flash_box(session_id).seal(json.dumps(flash), (_digest(session_id),))


def _open_flash(session_id: str, box: str) -> Flash:
    """The messages in `box`; none when it does not open (it was not sealed for this id)."""
    if not box:
        return []
    try:
        pairs = json.loads(_flash_box(session_id).open(box, (_digest(session_id),)))
    except (SecretBoxError, ValueError):
        return []
    return [(str(kind), str(text)) for kind, text in pairs]


def _id_bytes(session_id: str) -> bytes:
    return session_id.encode("utf-8", "surrogateescape")


def _digest(session_id: str) -> str:
    return hashlib.sha256(_id_bytes(session_id)).hexdigest()
