-- Issue #25: usage analytics (GET /v1/usage, storage/usage.py, docs/usage.md). What an
-- organization's inference requests did, added up per UTC hour (and, the same sums again,
-- per UTC day: a year's query reads 365 days, not 8,760 hours), key, model and provider.
-- Written by the usage flush in the same transaction as the ledger's usage rows (requests
-- charged, tokens, cost, and the errors among them) and by the event writer in the same
-- transaction as the `completion.error` events of requests that failed without a charge
-- (requests and errors). So `cost_micros` always sums to what the flush's usage rows took.
-- '' for a request without a key (a mirrored call) or without a known model or provider (not
-- a NULL: the primary key is the UPSERT's conflict target). No foreign keys: a flush's write
-- stays one statement per table. On SQLite the rows are stored in the key's order (WITHOUT
-- ROWID): a range read is one walk of one b-tree.
CREATE TABLE usage_hourly (
    org_id         TEXT NOT NULL,
    hour           BIGINT NOT NULL,      -- the UTC hour's start, µs since the epoch
    key_id         TEXT NOT NULL,
    model          TEXT NOT NULL,
    provider       TEXT NOT NULL,
    requests       BIGINT NOT NULL,
    input_tokens   BIGINT NOT NULL,
    output_tokens  BIGINT NOT NULL,
    cost_micros    BIGINT NOT NULL,
    errors         BIGINT NOT NULL,
    -- Reads take one org's range of hours: the key's prefix (org_id, hour) serves them.
    PRIMARY KEY (org_id, hour, key_id, model, provider)
) {{without_rowid}};
CREATE TABLE usage_daily (
    org_id         TEXT NOT NULL,
    day            BIGINT NOT NULL,      -- the UTC day's start, µs since the epoch
    key_id         TEXT NOT NULL,
    model          TEXT NOT NULL,
    provider       TEXT NOT NULL,
    requests       BIGINT NOT NULL,
    input_tokens   BIGINT NOT NULL,
    output_tokens  BIGINT NOT NULL,
    cost_micros    BIGINT NOT NULL,
    errors         BIGINT NOT NULL,
    PRIMARY KEY (org_id, day, key_id, model, provider)
) {{without_rowid}};
