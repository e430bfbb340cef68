"""Console sessions: a random id in an HttpOnly cookie, everything else on the server.

Kept in this process's memory (docs/console.md): a restart, or another worker of
`gateway serve --workers N`, does not know the session, and the browser is asked to sign in
again. The credential itself is never kept: an organization's session keeps the hash its
management key is stored under, so that each request can check the key was not revoked since.

A session ends after `idle_s` without a request or `max_age_s` after sign-in, whichever comes
first. Ids are looked up by their SHA-256, so the lookup's timing says nothing about the id.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

IDLE_S = 8 * 3600.0
MAX_AGE_S = 24 * 3600.0
MAX_SESSIONS = 10_000  # past this the oldest are dropped (each sign-in adds one)


@dataclass
class Session:
    """Who signed in: the operator (every org) or one organization's management key."""

    operator: bool
    org_id: str | None  # None for the operator
    key_hash: str | None  # the management key's stored hash (an org session)
    label: str  # shown in the header: "operator" or the org's name
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    created: float = 0.0
    seen: float = 0.0
    flash: list[tuple[str, str]] = field(default_factory=list)  # (kind, text) shown once


class SessionStore:
    def __init__(
        self,
        *,
        idle_s: float = IDLE_S,
        max_age_s: float = MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._idle_s = idle_s
        self._max_age_s = max_age_s
        self._clock = clock
        self._sessions: dict[bytes, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, session: Session) -> str:
        """Store `session`; returns the id to put in the cookie."""
        if len(self._sessions) >= MAX_SESSIONS:
            self._expire()
            while len(self._sessions) >= MAX_SESSIONS:  # dicts keep insertion order
                del self._sessions[next(iter(self._sessions))]
        session_id = secrets.token_urlsafe(32)
        now = self._clock()
        session.created = session.seen = now
        self._sessions[_digest(session_id)] = session
        return session_id

    def get(self, session_id: str | None) -> Session | None:
        """The live session of that id (its idle clock restarted), or None."""
        if not session_id or len(session_id) > 128:
            return None
        key = _digest(session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        now = self._clock()
        if now - session.seen > self._idle_s or now - session.created > self._max_age_s:
            del self._sessions[key]
            return None
        session.seen = now
        return session

    def end(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(_digest(session_id), None)

    def _expire(self) -> None:
        now = self._clock()
        for key, s in list(self._sessions.items()):
            if now - s.seen > self._idle_s or now - s.created > self._max_age_s:
                del self._sessions[key]


def _digest(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).digest()
