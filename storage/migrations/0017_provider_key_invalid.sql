-- Issue #22: a provider key the provider refused at use (401/403) is marked invalid and no
-- longer used, until it is replaced (POST /v1/provider_keys clears the mark).
-- invalid_since:  when it was marked (µs); NULL while it is valid. Existing keys start valid,
--                 whatever their last_rejected_at (under the old rule it was only a note).
-- invalid_status: the provider's HTTP status then (401 or 403).
-- fallback_to_gateway_key: the organization opted in to the gateway's own key (billed as
--                 usual) while this key is invalid; otherwise requests are refused.
ALTER TABLE provider_keys ADD COLUMN invalid_since BIGINT;
ALTER TABLE provider_keys ADD COLUMN invalid_status INTEGER;
ALTER TABLE provider_keys ADD COLUMN fallback_to_gateway_key BOOLEAN NOT NULL DEFAULT FALSE;
