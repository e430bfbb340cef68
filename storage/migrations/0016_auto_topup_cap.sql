-- Issue #20: auto-replenish fires on crossing the threshold, at most N times per org and UTC day.
-- replenish_due: set by the usage write that took the balance from above the threshold to at or
-- below it (or by switching auto-replenish on at or below it); the claim clears it.
-- auto_topup_day/auto_topup_count: automatic top-ups claimed on that UTC day (d:2026-11-26).
-- auto_topup_limited_day: the day billing.auto_topup_limited was written (once a day).
ALTER TABLE credit_accounts ADD COLUMN replenish_due BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE credit_accounts ADD COLUMN auto_topup_day TEXT;
ALTER TABLE credit_accounts ADD COLUMN auto_topup_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE credit_accounts ADD COLUMN auto_topup_limited_day TEXT;
