-- Files (storage/files.py, gateway/files/): metadata, the sealed per-file data key, and the bytes
-- each file holds against its organization's storage quota. The content is a blob (storage/blobs/)
-- encrypted under the data key (protocol/blobcrypt.py).
CREATE TABLE files (
    id               TEXT PRIMARY KEY,        -- file_<ordered id>: sorts by creation time
    org_id           TEXT NOT NULL REFERENCES orgs (id),
    purpose          TEXT NOT NULL,
    filename         TEXT NOT NULL,           -- the client's label, never a path
    bytes            BIGINT NOT NULL,         -- plaintext size (0 while uploading)
    media_type       TEXT NOT NULL,
    status           TEXT NOT NULL,           -- uploading (never shown by the API), processed
    blob_key         TEXT NOT NULL,
    data_key_sealed  TEXT NOT NULL,           -- protocol/secretbox.py FILE_KEYS, (org id, file id)
    charged_bytes    BIGINT NOT NULL,         -- held against the quota (reserved while uploading)
    created_at       BIGINT NOT NULL,         -- µs
    updated_at       BIGINT NOT NULL,         -- µs; an upload touches it as it grows
    expires_at       BIGINT                   -- µs; vision files: created_at + 24 h
);
CREATE INDEX files_org_created ON files (org_id, created_at, id);
CREATE INDEX files_expiry ON files (expires_at);
CREATE INDEX files_status_updated ON files (status, updated_at);

-- The quota counter: always the sum of the org's files.charged_bytes, changed in the same
-- transaction as them by a conditional UPDATE, so concurrent uploads on any instance cannot
-- pass the quota together.
CREATE TABLE file_usage (
    org_id  TEXT PRIMARY KEY REFERENCES orgs (id),
    bytes   BIGINT NOT NULL
);
