-- Generated images answered as `url` (storage/images.py, gateway/images/): the PNG is a blob
-- (storage/blobs/, key images/<org id>/<id>) encrypted under its own data key
-- (protocol/blobcrypt.py), sealed under the master key here. The URL's token is a capability:
-- only its SHA-256 is stored, so the table alone does not give the URLs away.
CREATE TABLE images (
    id               TEXT PRIMARY KEY,        -- img_<ordered id>
    org_id           TEXT NOT NULL REFERENCES orgs (id),
    token_hash       TEXT NOT NULL UNIQUE,    -- hex SHA-256 of the URL's random token
    blob_key         TEXT NOT NULL,
    data_key_sealed  TEXT NOT NULL,           -- protocol/secretbox.py FILE_KEYS, (org id, id)
    bytes            BIGINT NOT NULL,         -- plaintext size
    media_type       TEXT NOT NULL,
    created_at       BIGINT NOT NULL,         -- µs
    expires_at       BIGINT NOT NULL          -- µs; created_at + [images] url_lifetime_s
);
CREATE INDEX images_expiry ON images (expires_at);
