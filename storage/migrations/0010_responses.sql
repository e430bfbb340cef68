-- Stored responses (storage/responses.py, gateway/responses/): one row per response created
-- with `store` true. The row is self-contained: `content_encrypted` holds the response object
-- and its whole context (the earlier responses' inputs and outputs, then its own input), so a
-- continuation reads one row and never walks a chain. The content is encrypted under the
-- row's own data key (protocol/secretbox.py SecretBox), which is sealed under the master key
-- here: a key rotation re-seals only the data key.
CREATE TABLE responses (
    id                 TEXT PRIMARY KEY,        -- resp_<ordered id>
    org_id             TEXT NOT NULL REFERENCES orgs (id),
    model              TEXT NOT NULL,
    data_key_sealed    TEXT NOT NULL,           -- protocol/secretbox.py FILE_KEYS, (org id, id)
    content_encrypted  TEXT NOT NULL,           -- SecretBox(data key, RESPONSE_CONTENT), (org id, id)
    created_at         BIGINT NOT NULL,         -- µs
    expires_at         BIGINT NOT NULL          -- µs; created_at + 30 days (retention)
);
CREATE INDEX responses_expiry ON responses (expires_at);
