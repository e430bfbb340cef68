-- The operator console's sessions (gateway/console/sessions.py, docs/console.md), shared by
-- every instance and worker on this database and kept across restarts. The browser's cookie
-- holds a random id; only its SHA-256 (hex) is stored, so reading this table signs nobody in.
-- An operator session names the fingerprint of the GATEWAY_OPERATOR_KEY it signed in with
-- (`operator_key`), an organization's session the org and the stored hash of its management
-- key (`key_hash`): each request checks that key is still configured, or not revoked. The
-- CSRF token is derived from the cookie's id, never stored. `flash_box` holds the messages of
-- the last action until the next page shows them (a new key's secret among them), encrypted
-- under a key derived from the cookie's id too ('' when there are none). Times are wall-clock
-- µs since the epoch: instances compare them with each other's.
CREATE TABLE console_sessions (
    id_hash       TEXT PRIMARY KEY,
    operator_key  TEXT,
    org_id        TEXT,
    key_hash      TEXT,
    label         TEXT NOT NULL,
    flash_box     TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    seen_at       BIGINT NOT NULL
);
-- The purge deletes by age: rows idle too long or signed in too long ago.
CREATE INDEX console_sessions_seen ON console_sessions (seen_at);
CREATE INDEX console_sessions_created ON console_sessions (created_at);
