-- The keyring (storage/keyring.py, protocol/keyring.py): one row, what the master key protects
-- beyond the per-row secrets. The credential pepper lives here sealed under the master key, so
-- rotating the master key re-seals it and every API key hash stays valid.
CREATE TABLE keyring (
    id                     INTEGER PRIMARY KEY,  -- always 1
    master_key_id          TEXT NOT NULL,        -- check value: protocol/keyring.py key_id()
    pepper_sealed          TEXT NOT NULL,        -- protocol/secretbox.py KEYRING, credential pepper
    master_key_created_at  BIGINT NOT NULL,      -- µs; the age in /metrics counts from here
    next_master_key_id     TEXT,                 -- a rotation under way: the key it goes to
    rotation_started_at    BIGINT,               -- µs
    updated_at             BIGINT NOT NULL       -- µs
);
