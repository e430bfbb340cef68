"""Bring-your-own-key on the hot path: which key a request to a provider is sent with.

`lookup(org, provider)` answers the org's own key in clear, or None (use the gateway's), from
an in-memory cache: only a miss reads storage and opens the sealed value. The cache is dropped
- at once on this instance when a provider key changes here (`forget`), and
- within a second on every other instance: each change bumps the credential epoch, and the
  epoch watcher calls `invalidate_all` (docs/decisions.md, "Provider keys").
Entries also expire after `ttl` seconds as a last resort; absent keys are cached too (most orgs
have none, and every request asks).

`report_invalid` records that the provider refused the key: storage marks it invalid with one
`provider_key.invalid` event (once per key, across instances), and this instance forgets it at
once (the others with the epoch). From then on `lookup` refuses requests to that provider
(400 `invalid_provider_key`), or answers None — the gateway's key, billed as usual — when the
org opted in (`fallback_to_gateway_key`), until the key is replaced. Reports are claimed in
memory first, once per key per `report_interval` (a burst of in-flight refusals costs one
write). What is marked is the value this instance answered for the refused request — never one
stored since (a key replaced while an old copy was still in use must not be marked by the old
copy's refusal): the value last answered is remembered beyond the cache's invalidations, with
when it took over from another value (`time.perf_counter`, the request context's clock).

Time is Trio's clock, so tests drive it with MockClock.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import trio

from protocol.errors import APIError, SecretBoxError
from protocol.provider_keys import key_marked_invalid, sealing_context
from protocol.secretbox import SecretBox
from protocol.timefmt import to_iso
from services.keyring import recheck_after_failure
from storage.provider_keys import ProviderKeyRepository, SealedProviderKey

log = logging.getLogger("gateway.provider_keys")
_MAX_ENTRIES = 100_000


class ReportThrottle:
    """Whether to report a provider's refusal of a key now: once per (key id, sealed value)
    per `interval` seconds. No I/O; the caller passes the time and releases a claim whose write
    did not happen. Memory is bounded by `max_entries` (past it everything is forgotten: at
    worst one extra write per key: storage marks a key once, across instances anyway)."""

    def __init__(self, interval: float, *, max_entries: int = _MAX_ENTRIES) -> None:
        self._interval = interval
        self._max_entries = max_entries
        self._last: dict[tuple[str, str], float] = {}

    def __len__(self) -> int:
        return len(self._last)

    def claim(self, marker: tuple[str, str], now: float) -> bool:
        last = self._last.get(marker)
        if last is not None and now - last < self._interval:
            return False
        if len(self._last) >= self._max_entries:
            self._last.clear()
        self._last[marker] = now
        return True

    def release(self, marker: tuple[str, str]) -> None:
        self._last.pop(marker, None)


@dataclass(frozen=True, slots=True)
class _Entry:
    key: SealedProviderKey | None  # None: the org has no key for this provider
    api_key: str | None  # opened; None also when it could not be opened, or is invalid
    loaded_at: float


@dataclass(frozen=True, slots=True)
class _Answered:
    key: SealedProviderKey  # the value `lookup` last answered for an (org, provider)
    # time.perf_counter() when it took over from another value (-inf: none answered before it,
    # since this instance started); a request begun earlier may have been given the other.
    changed_at: float


class ProviderKeyResolver:
    def __init__(
        self,
        repo: ProviderKeyRepository,
        box: SecretBox,
        *,
        ttl: float = 60.0,
        report_interval: float = 60.0,
    ) -> None:
        self._repo = repo
        self.box = box
        self._ttl = ttl
        self._report_interval = report_interval
        self._cache: dict[tuple[str, str], _Entry] = {}
        self._answered: dict[tuple[str, str], _Answered] = {}  # kept through invalidations
        self._answered_cleared_at = float("-inf")  # when `_answered` was last emptied (full)
        self._generation = 0  # moves on every drop: a load begun before it is not cached
        self._reported = ReportThrottle(report_interval)  # per (key id, sealed value)
        self.hits = 0
        self.misses = 0
        self.reports = 0

    def __repr__(self) -> str:
        return f"<ProviderKeyResolver cached={len(self._cache)} hits={self.hits}>"

    def statistics(self) -> dict[str, int]:
        return {
            "cached": len(self._cache),
            "hits": self.hits,
            "misses": self.misses,
            "reports": self.reports,
        }

    def invalidate_all(self) -> None:
        self._cache.clear()
        self._generation += 1

    def forget(self, org_id: str, provider: str) -> None:
        """Drop one entry (a change made through this instance)."""
        self._cache.pop((org_id, provider), None)
        self._generation += 1

    async def lookup(self, org_id: str, provider: str) -> str | None:
        """The org's own key for `provider` in clear, or None (the gateway's key). A key marked
        invalid is never answered: APIError 400 `invalid_provider_key`, or None if the org
        opted in to the gateway's key meanwhile. APIError 500 if a stored key cannot be opened
        (never a silent fall back to the gateway's key, which would bill the gateway's
        account). Cancellation: only a cache miss awaits; nothing is cached then."""
        entry = self._cache.get((org_id, provider))
        if entry is not None and trio.current_time() - entry.loaded_at < self._ttl:
            self.hits += 1
        else:
            self.misses += 1
            entry = await self._load(org_id, provider)
        key = entry.key
        if key is not None and key.invalid_since is not None:
            if key.fallback_to_gateway_key:
                return None
            raise key_marked_invalid(provider, to_iso(key.invalid_since), key.invalid_status)
        if key is None:
            return None
        if entry.api_key is None:
            raise _unreadable(provider)
        answered = self._answered.get((org_id, provider))
        if answered is None or answered.key.sealed_key != key.sealed_key:
            self._note_answered(org_id, provider, key, first=answered is None)
        return entry.api_key

    def _note_answered(
        self, org_id: str, provider: str, key: SealedProviderKey, *, first: bool
    ) -> None:
        now = time.perf_counter()
        if len(self._answered) >= _MAX_ENTRIES:
            self._answered.clear()  # what was answered before is unknown from now on
            self._answered_cleared_at = now
            first = True
        changed_at = self._answered_cleared_at if first else now
        self._answered[(org_id, provider)] = _Answered(key, changed_at)

    async def report_invalid(
        self,
        org_id: str,
        provider: str,
        *,
        status: int | None = None,
        started: float | None = None,
    ) -> bool:
        """The provider refused the org's key (`status`: its HTTP status) on a request that
        began at `started` (`time.perf_counter()`) and was given the key by this instance's
        `lookup`: mark that value invalid in storage with its `provider_key.invalid` event,
        unless it already is (here or on another instance) or was replaced meanwhile, and stop
        using it. Nothing is marked when the value answered changed after `started` (which one
        the request got is unknown: the next refusal will tell), nor when none was answered.
        True if this call marked it. Cancellation: nothing is written, and the next report
        tries again."""
        answered = self._answered.get((org_id, provider))
        if answered is None or (started is not None and answered.changed_at > started):
            return False
        key = answered.key
        marker = (key.id, key.sealed_key)
        if not self._reported.claim(marker, trio.current_time()):
            return False
        try:
            marked = await self._repo.mark_invalid(org_id, key, status=status)
        except BaseException:
            self._reported.release(marker)
            raise
        # Marked now, before, or replaced: either way what is cached is stale (the other
        # instances drop theirs with the epoch the mark moved).
        self.forget(org_id, provider)
        if marked is None:
            return False
        self.reports += 1
        log.warning(
            "provider %r rejected the key %s of org %s (%s): marked invalid",
            provider,
            key.id,
            org_id,
            status,
        )
        return True

    async def _load(self, org_id: str, provider: str) -> _Entry:
        generation = self._generation
        key = await self._repo.for_use(org_id, provider)
        api_key: str | None = None
        if key is not None and key.invalid_since is None:  # an invalid key is never sent
            try:
                api_key = self.box.open(key.sealed_key, sealing_context(org_id, provider))
            except SecretBoxError as exc:
                await recheck_after_failure(self.box)  # master_key_rotated if that is why
                log.error("provider key %s of org %s cannot be opened: %s", key.id, org_id, exc)
        entry = _Entry(key, api_key, trio.current_time())
        if generation == self._generation:
            if len(self._cache) >= _MAX_ENTRIES:
                self._cache.clear()
            self._cache[(org_id, provider)] = entry
        return entry


def _unreadable(provider: str) -> APIError:
    return APIError(
        500,
        f"This organization's key for the provider {provider!r} cannot be read (was the master"
        " key changed?); set it again with POST /v1/provider_keys.",
        type="server_error",
        code="provider_key_unreadable",
    )
