"""Authentication on the hot path: bearer credential -> Principal, from an in-memory cache.

A presented credential is hashed (HMAC with the pepper) and looked up in a cache keyed by that
hash; only a miss reaches the database. The cache is dropped:
- at once on this instance when a key changes here (`invalidate_all`), and
- within a second on every other instance, when the credential epoch in storage moves
  (CredentialEpochWatcher) — that covers `--workers`, other hosts, both backends.
Entries also expire after `ttl` seconds as a last resort. `expires_at` is checked at each use.
Uses are reported to a sink at most once per key per second, never awaited here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from protocol.credentials import CredentialHasher, CredentialKind, kind_of
from protocol.errors import unauthenticated
from protocol.timefmt import now_us
from services.principal import Principal
from storage.open import Storage

_MAX_ENTRIES = 100_000
_NOTE_EVERY_S = 1.0


@dataclass(slots=True)
class _Entry:
    principal: Principal | None  # None: no such credential
    revoked: bool
    loaded_at: float


class Authenticator:
    def __init__(
        self,
        storage: Storage,
        hasher: CredentialHasher,
        *,
        note_use: Callable[[str, int], None] = lambda key_id, when: None,
        ttl: float = 60.0,
        negative_ttl: float = 5.0,
    ) -> None:
        self._storage = storage
        self._hasher = hasher
        self._note_use = note_use
        self._ttl = ttl
        self._negative_ttl = negative_ttl
        self._cache: dict[str, _Entry] = {}
        self._last_noted: dict[str, float] = {}
        self.hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        return f"<Authenticator cached={len(self._cache)} hits={self.hits} misses={self.misses}>"

    def statistics(self) -> dict[str, int]:
        return {"cached": len(self._cache), "hits": self.hits, "misses": self.misses}

    def invalidate_all(self) -> None:
        self._cache.clear()

    async def authenticate(self, authorization: str | None) -> Principal:
        """The caller's Principal, or APIError 401. Cancellation: only a cache miss awaits."""
        token = bearer(authorization)
        if kind_of(token) is None:
            raise unauthenticated("Invalid API key: unknown credential format.")
        digest = self._hasher.hash(token)
        now = time.monotonic()
        entry = self._cache.get(digest)
        if entry is None or now - entry.loaded_at > (
            self._ttl if entry.principal else self._negative_ttl
        ):
            self.misses += 1
            entry = await self._load(token, digest, now)
        else:
            self.hits += 1
        principal = entry.principal
        if principal is None:
            raise unauthenticated("Invalid API key provided.")
        if entry.revoked:
            raise unauthenticated("This API key has been revoked.", code="key_revoked")
        key = principal.key
        wall = now_us()
        if key is not None:
            if not key.is_active:
                raise unauthenticated("This API key is disabled.", code="key_disabled")
            if key.expires_at is not None and key.expires_at <= wall:
                raise unauthenticated("This API key has expired.", code="key_expired")
        # Secret and management keys alike (`gateway admin management-keys list` shows it).
        if now - self._last_noted.get(principal.key_id, -_NOTE_EVERY_S) >= _NOTE_EVERY_S:
            self._last_noted[principal.key_id] = now
            self._note_use(principal.key_id, wall)
        return principal

    async def _load(self, token: str, digest: str, now: float) -> _Entry:
        if len(self._cache) >= _MAX_ENTRIES:
            self._cache.clear()
            self._last_noted.clear()
        entry = _Entry(principal=None, revoked=False, loaded_at=now)
        if kind_of(token) is CredentialKind.MANAGEMENT:
            mk = await self._storage.orgs.find_management_key(digest)
            if mk is not None:
                entry.principal = Principal(mk.org_id, CredentialKind.MANAGEMENT, mk.id, None)
                entry.revoked = mk.revoked_at is not None
        else:
            key = await self._storage.keys.find_by_hash(digest)
            if key is not None:
                entry.principal = Principal(key.org_id, CredentialKind.SECRET, key.id, key)
                entry.revoked = key.deleted_at is not None
        self._cache[digest] = entry
        return entry


def bearer(authorization: str | None) -> str:
    """The token of a `Bearer` Authorization header; APIError 401 when missing or malformed."""
    if not authorization:
        raise unauthenticated(
            "Missing credential: send `Authorization: Bearer <key>`.", code="missing_api_key"
        )
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise unauthenticated(
            "Malformed Authorization header: expected `Bearer <key>`.", code="invalid_api_key"
        )
    return token
