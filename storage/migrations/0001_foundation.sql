-- Organizations, their credentials, and the durable events outbox.
-- Times are integer microseconds since the Unix epoch (UTC); money is integer micro-USD.

CREATE TABLE orgs (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    plan        TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);

CREATE TABLE management_keys (
    id            TEXT PRIMARY KEY,
    org_id        TEXT NOT NULL REFERENCES orgs (id),
    key_hash      TEXT NOT NULL UNIQUE,
    key_prefix    TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    last_used_at  BIGINT,
    revoked_at    BIGINT
);

CREATE TABLE api_keys (
    id                     TEXT PRIMARY KEY,
    org_id                 TEXT NOT NULL REFERENCES orgs (id),
    name                   TEXT NOT NULL,
    key_hash               TEXT NOT NULL UNIQUE,
    key_prefix             TEXT NOT NULL,
    scopes                 TEXT,            -- JSON array; NULL holds every scope
    rate_limit_rpm         BIGINT,
    daily_budget_micros    BIGINT,
    monthly_budget_micros  BIGINT,
    allowed_models         TEXT,            -- JSON array; NULL allows every model
    expires_at             BIGINT,
    is_active              BOOLEAN NOT NULL,
    created_at             BIGINT NOT NULL,
    updated_at             BIGINT NOT NULL,
    last_used_at           BIGINT,
    deleted_at             BIGINT
);

CREATE UNIQUE INDEX api_keys_org_name ON api_keys (org_id, name) WHERE deleted_at IS NULL;
CREATE INDEX api_keys_org_created ON api_keys (org_id, created_at);

-- Bumped in the same transaction as any credential change; every instance polls it and
-- drops its credential cache when it moves (docs/decisions.md, "credential cache").
CREATE TABLE cache_epochs (
    name   TEXT PRIMARY KEY,
    epoch  BIGINT NOT NULL
);
INSERT INTO cache_epochs (name, epoch) VALUES ('credentials', 0);

CREATE TABLE events (
    seq         {{serial_pk}},
    id          TEXT NOT NULL UNIQUE,
    org_id      TEXT NOT NULL REFERENCES orgs (id),
    type        TEXT NOT NULL,
    data        TEXT NOT NULL,              -- the envelope's `data`, JSON
    created_at  BIGINT NOT NULL
);
CREATE INDEX events_org_seq ON events (org_id, seq);
