-- Issue #23: a key may opt out of the response cache (docs/cache.md, "Opting in and out").
-- cache: FALSE, the key's requests are neither answered from the cache nor stored in it.
ALTER TABLE api_keys ADD COLUMN cache BOOLEAN NOT NULL DEFAULT TRUE;
