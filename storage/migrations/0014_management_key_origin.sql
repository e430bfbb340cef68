-- Issue #20: where a management key came from, so that a new GATEWAY_BOOTSTRAP_MANAGEMENT_KEY
-- value can revoke the one it replaces. 'bootstrap', 'first_start', 'create_org' or 'cli';
-- NULL for keys made before this migration (never revoked by a bootstrap change).
ALTER TABLE management_keys ADD COLUMN origin TEXT;
