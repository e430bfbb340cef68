-- Issue #23: the response cache (storage/response_cache.py, services/cache/store.py,
-- docs/cache.md "Store"). One row per cached answer, keyed by the organization and the entry
-- key (a digest of the normalized request: services/cache/keys.py). Nothing in it is in clear:
-- `body`, `query` and `vector` are AES-GCM sealed (services/cache/sealing.py) with the org id
-- and the entry key as associated data. BYTEA: PostgreSQL's byte string; SQLite stores a
-- byte value as a BLOB under any declared type (NUMERIC affinity converts only text).
-- No foreign key on org_id: the cache is disposable, and a write per answer stays one row.
CREATE TABLE response_cache (
    org_id             TEXT NOT NULL,
    key                BYTEA NOT NULL,           -- the entry key (digest)
    model              TEXT NOT NULL,            -- the model id the answer came from
    key_id             TEXT,                     -- the caller who stored it (purge by key)
    kind               TEXT NOT NULL,            -- "json" | "sse"
    body               BYTEA NOT NULL,           -- sealed answer
    prompt_tokens      BIGINT NOT NULL,
    completion_tokens  BIGINT NOT NULL,
    size               BIGINT NOT NULL,          -- stored bytes (sealed body, query, vector)
    created_at         BIGINT NOT NULL,          -- µs
    expires_at         BIGINT NOT NULL,          -- µs
    last_used_at       BIGINT NOT NULL,          -- µs; least recently used go first
    hits               BIGINT NOT NULL,
    scope              BYTEA,                    -- semantic mode: the scope digest
    query              BYTEA,                    -- semantic mode: sealed query text
    vector             BYTEA,                    -- semantic mode: sealed float32 embedding
    PRIMARY KEY (org_id, key)
);
-- Semantic candidates: an org's scope, newest first.
CREATE INDEX response_cache_scope ON response_cache (org_id, scope, created_at);
-- Eviction (least recently used first) and expiry, across organizations.
CREATE INDEX response_cache_lru ON response_cache (last_used_at);
CREATE INDEX response_cache_expiry ON response_cache (expires_at);
-- Purges: everything of an org or older than an age, by model, by key.
CREATE INDEX response_cache_org_age ON response_cache (org_id, created_at);
CREATE INDEX response_cache_org_model ON response_cache (org_id, model);
CREATE INDEX response_cache_org_key ON response_cache (org_id, key_id);
