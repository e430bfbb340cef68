-- Bring-your-own-key: an organization's own key for a provider, at most one per provider.
-- Only the sealed key is stored (protocol/secretbox.py: AES-256-GCM, bound to org and provider)
-- and its last characters for display. A deleted key's row is removed with its ciphertext.
CREATE TABLE provider_keys (
    id                TEXT PRIMARY KEY,
    org_id            TEXT NOT NULL REFERENCES orgs (id),
    provider          TEXT NOT NULL,       -- a [[providers]] name
    sealed_key        TEXT NOT NULL,       -- `v1:` + base64(nonce ‖ ciphertext ‖ tag)
    key_hint          TEXT NOT NULL,       -- the last 4 characters ('' for short keys)
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    last_rejected_at  BIGINT               -- the provider last refused it at use
);
CREATE UNIQUE INDEX provider_keys_org_provider ON provider_keys (org_id, provider);
