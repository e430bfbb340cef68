-- Webhook subscriptions, their delivery queues and the delivery log.

-- The outbox order across instances (storage/webhooks/, "Order"): on PostgreSQL the id of the
-- transaction that wrote the event (sequence values are taken at insert, not at commit, so `seq`
-- alone can show a later event before an earlier one commits); 0 on SQLite, whose one writer at a
-- time already commits in `seq` order. `webhook_id` targets one subscription (a test event);
-- NULL: every subscription of the org whose `events` match.
ALTER TABLE events ADD COLUMN txid BIGINT NOT NULL DEFAULT {{txid_default}};
ALTER TABLE events ADD COLUMN webhook_id TEXT;
CREATE INDEX events_org_order ON events (org_id, txid, seq);
CREATE INDEX events_order ON events (txid, seq);  -- the waker's reads across orgs
CREATE INDEX events_created ON events (created_at);

CREATE TABLE webhooks (
    id                          TEXT PRIMARY KEY,
    org_id                      TEXT NOT NULL REFERENCES orgs (id),
    url                         TEXT NOT NULL,
    events                      TEXT NOT NULL,      -- JSON array of types, or ["*"]
    description                 TEXT,
    enabled                     BOOLEAN NOT NULL,
    secret_sealed               TEXT NOT NULL,      -- protocol/secretbox.py, context (org, id)
    secret_hint                 TEXT NOT NULL,      -- whsec_…abcd, for the API
    previous_secret_sealed      TEXT,               -- still signs until the overlap ends
    previous_secret_expires_at  BIGINT,
    disabled_reason             TEXT,               -- "failing" (6 retries failed) or "manual"
    disabled_at                 BIGINT,
    cursor_txid                 BIGINT NOT NULL,    -- outbox events up to here were looked at
    cursor_seq                  BIGINT NOT NULL,
    lease_owner                 TEXT,               -- the instance delivering its queue
    lease_expires_at            BIGINT,
    created_at                  BIGINT NOT NULL,
    updated_at                  BIGINT NOT NULL
);
CREATE INDEX webhooks_org_created ON webhooks (org_id, created_at);

-- One row per event queued for a subscription: the queue (status pending, in `position`
-- order) and the delivery log. `position` is the queue order; a redelivery moves the row to
-- the tail of the queue.
CREATE TABLE webhook_deliveries (
    webhook_id        TEXT NOT NULL,
    event_id          TEXT NOT NULL,
    position          BIGINT NOT NULL,
    status            TEXT NOT NULL,     -- pending, delivered, failed, dropped, cancelled
    attempts          INTEGER NOT NULL,  -- made since it was (re)queued
    next_attempt_at   BIGINT,            -- while pending
    last_status_code  INTEGER,
    last_error        TEXT,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    PRIMARY KEY (webhook_id, event_id)
);
CREATE INDEX webhook_deliveries_queue ON webhook_deliveries (webhook_id, status, position);
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (webhook_id, position);  -- log, tail
CREATE INDEX webhook_deliveries_updated ON webhook_deliveries (updated_at);
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);  -- the janitor's check

CREATE TABLE webhook_attempts (
    seq          {{serial_pk}},
    webhook_id   TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    started_at   BIGINT NOT NULL,
    duration_ms  INTEGER NOT NULL,
    status_code  INTEGER,            -- NULL: no response (error says why)
    error        TEXT,
    outcome      TEXT NOT NULL       -- delivered, retry, permanent
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (webhook_id, event_id, seq);
CREATE INDEX webhook_attempts_started ON webhook_attempts (started_at);
