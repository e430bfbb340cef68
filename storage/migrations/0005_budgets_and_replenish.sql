-- Per-key budget alerts and auto-replenish bookkeeping.

-- Budget events already sent, so each fires once per key, period and kind (`50`, `80`, `100`
-- for budget.threshold, `exhausted` for budget.exhausted), across instances and restarts.
CREATE TABLE budget_alerts (
    key_id      TEXT NOT NULL,
    period      TEXT NOT NULL,   -- d:2026-11-22 or m:2026-11, as in key_spend
    kind        TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (key_id, period, kind)
);

-- Auto-replenish: one attempt at a time per org across instances (a claim with a time stamp),
-- and a declined payment recorded and retried later rather than in a loop.
ALTER TABLE credit_accounts ADD COLUMN replenish_claimed_at BIGINT;
ALTER TABLE credit_accounts ADD COLUMN replenish_failed_at BIGINT;
ALTER TABLE credit_accounts ADD COLUMN replenish_failure TEXT;
