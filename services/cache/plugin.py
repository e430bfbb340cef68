"""The response cache as a plugin (services/plugins/interface.py; docs/cache.md).

`before`: a request the cache may answer (its model caches, the client did not opt out, and
it is deterministic enough: keys.py `cacheable`) is looked up by its exact key (keys.py
`exact_key`: organization, route, model, streamed or not, and the fields that change the
answer); in semantic mode, failing that, by its last user turn's embedding among the entries
of the same scope (keys.py `semantic_scope`: same organization, model, system prompt, tools
and earlier turns), above the similarity threshold and only when `semantic.same_question`
agrees. A hit is answered by the route (`Stored`), billed at the model's
`cache_hit_usd_per_mtok`; the answer says `x-gateway-cache: hit`, `miss` or `bypass`.

`finished`: a whole answer to a request that missed is stored, in the background (the
instance's `BackgroundTasks`), never delaying the answer. A cache that fails is a miss
(`on_error = "fail_open"`): the request goes upstream.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from services.cache.keys import cacheable, exact_key, query_text, semantic_scope
from services.cache.semantic import best_match
from services.cache.store import CachedAnswer, ResponseCache
from services.plugins.interface import Exchange, Hook, OnError, Outcome, OutputCheck, Stored

Embed = Callable[[str], Awaitable[bytes]]  # text -> its encoded, normalised vector
Spawn = Callable[[Callable[[], Awaitable[None]]], bool]  # background work; False: dropped
CACHED_ROUTES = frozenset({"chat", "responses", "embeddings"})
SEMANTIC_ROUTES = frozenset({"chat", "responses"})
HIT = (b"x-gateway-cache", b"hit")
MISS = (b"x-gateway-cache", b"miss")
BYPASS = (b"x-gateway-cache", b"bypass")


@dataclass(slots=True)
class CacheStats:
    hits: int = 0
    semantic_hits: int = 0
    misses: int = 0
    bypasses: int = 0
    stores: int = 0
    saved_usd: float = 0.0  # the provider cost hits did not incur (the route adds it)


@dataclass(slots=True)
class _Pending:
    """What `before` learnt that `finished` needs to store the answer."""

    key: bytes
    ttl_s: float
    scope: bytes | None = None
    query: str | None = None
    vector: bytes | None = None


class ResponseCachePlugin:
    name = "cache"
    on_error: OnError = "fail_open"
    hooks: frozenset[Hook] = frozenset({"before", "finished"})

    def __init__(
        self,
        cache: ResponseCache,
        ttls: Mapping[str, float],
        spawn: Spawn,
        *,
        explicit_only: bool = False,
        max_entry_bytes: int = 1_048_576,
        embed: Embed | None = None,
        threshold: float = 0.95,
        timeout_s: float = 5.0,
    ) -> None:
        """`ttls`: the lifetime of each caching model's entries (models absent do not
        cache); `embed` (semantic mode): the embedding of a query."""
        self._cache = cache
        self._ttls = dict(ttls)
        self._spawn = spawn
        self._explicit_only = explicit_only
        self._max_entry_bytes = max_entry_bytes
        self._embed = embed
        self._threshold = threshold
        self.timeout_s: float | None = timeout_s
        self.stats = CacheStats()

    def applies(self, route: str, model: str) -> bool:
        return route in CACHED_ROUTES and model in self._ttls

    async def before(self, exchange: Exchange) -> Stored | None:
        if exchange.no_cache or exchange.cache_opt is False:
            return self._bypass(exchange)
        try:
            body: Any = msgspec.json.decode(exchange.body)
        except (msgspec.DecodeError, RecursionError):
            return self._bypass(exchange)
        explicit = exchange.cache_opt is True
        if (self._explicit_only and not explicit) or not cacheable(
            exchange.route, body, explicit=explicit
        ):
            return self._bypass(exchange)
        org = exchange.org_id
        key = exact_key(org, exchange.route, exchange.model, body, stream=exchange.stream)
        key = _with_usage(key, body) if exchange.stream else key
        pending = _Pending(key, self._ttls[exchange.model])
        exchange.notes[self.name] = pending
        exchange.headers.append(MISS)  # until a hit says otherwise
        answer = await self._cache.get(org, key)
        if answer is None and self._embed is not None and exchange.route in SEMANTIC_ROUTES:
            answer = await self._semantic(exchange, body, pending)
        if answer is None or answer.kind != ("sse" if exchange.stream else "json"):
            self.stats.misses += 1
            return None
        exchange.notes.pop(self.name, None)
        exchange.headers[-1] = HIT
        self.stats.hits += 1
        return Stored(answer.kind, answer.body, answer.prompt_tokens, answer.completion_tokens)

    async def _semantic(
        self, exchange: Exchange, body: Any, pending: _Pending
    ) -> CachedAnswer | None:
        assert self._embed is not None
        query = query_text(exchange.route, body)
        if query is None:
            return None
        org = exchange.org_id
        scope = semantic_scope(org, exchange.route, exchange.model, body)
        scope = _with_usage(scope, body) if exchange.stream else scope
        vector = await self._embed(query)
        pending.scope, pending.query, pending.vector = scope, query, vector
        candidates = await self._cache.candidates(org, scope)
        match = best_match(vector, query, candidates, self._threshold)
        if match is None:
            return None
        answer = await self._cache.get(org, match)
        if answer is not None:
            self.stats.semantic_hits += 1
        return answer

    def _bypass(self, exchange: Exchange) -> Stored | None:
        """Not looked up: the answer says so. None (the request goes upstream)."""
        exchange.headers.append(BYPASS)
        self.stats.bypasses += 1
        return None

    def output_check(self, exchange: Exchange) -> OutputCheck | None:
        return None

    async def after(self, exchange: Exchange, answer: bytes) -> bytes:
        return answer

    def finished(self, exchange: Exchange, outcome: Outcome) -> None:
        pending = exchange.notes.get(self.name)
        if not isinstance(pending, _Pending) or len(outcome.body) > self._max_entry_bytes:
            return
        answer = CachedAnswer(
            outcome.kind, outcome.body, outcome.prompt_tokens, outcome.completion_tokens, 0
        )
        cache, org, key_id, model = self._cache, exchange.org_id, exchange.key_id, exchange.model

        async def store() -> None:
            await cache.put(
                org,
                pending.key,
                answer,
                model=model,
                key_id=key_id,
                ttl_s=pending.ttl_s,
                scope=pending.scope,
                query=pending.query,
                vector=pending.vector,
            )
            self.stats.stores += 1

        self._spawn(store)


def _with_usage(digest: bytes, body: Any) -> bytes:
    """A streamed answer's digest, told apart by whether its client asked for the usage chunk
    (`stream_options.include_usage`): the frames replayed are the ones stored, so a client that
    asked for usage never gets a stream without it, nor one that did not ask a stream with it."""
    options = body.get("stream_options") if isinstance(body, dict) else None
    if isinstance(options, dict) and options.get("include_usage") is True:
        return hashlib.sha256(digest + b"\x00include_usage").digest()
    return digest
