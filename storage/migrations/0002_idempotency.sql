-- Idempotency keys of chat requests (`metadata.idempotency_key`), per organization, kept 24 h.
CREATE TABLE idempotency_keys (
    org_id       TEXT NOT NULL REFERENCES orgs (id),
    key          TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,          -- sha256 of the request body
    state        TEXT NOT NULL,          -- in_progress | completed | streamed
    response     TEXT,                   -- a completed JSON response, replayed on a retry
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
    PRIMARY KEY (org_id, key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);
