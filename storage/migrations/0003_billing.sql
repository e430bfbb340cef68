-- The prepaid credit ledger: one account per organization, one row per balance change.
-- Money is integer micro-USD; `balance_micros` always equals the sum of the org's
-- `transactions.amount_micros` (every change is one UPDATE plus its row, in one transaction).

CREATE TABLE credit_accounts (
    org_id                      TEXT PRIMARY KEY REFERENCES orgs (id),
    balance_micros              BIGINT NOT NULL,
    lifetime_spend_micros       BIGINT NOT NULL,
    auto_replenish              BOOLEAN NOT NULL,
    replenish_amount_micros     BIGINT,
    replenish_threshold_micros  BIGINT,
    updated_at                  BIGINT NOT NULL
);

CREATE TABLE transactions (
    seq                   {{serial_pk}},
    id                    TEXT NOT NULL UNIQUE,
    org_id                TEXT NOT NULL REFERENCES orgs (id),
    type                  TEXT NOT NULL,     -- topup | usage | refund | adjustment
    amount_micros         BIGINT NOT NULL,   -- negative for consumption
    balance_after_micros  BIGINT NOT NULL,
    description           TEXT NOT NULL,
    model                 TEXT,              -- usage rows
    request_id            TEXT,              -- usage rows: the request's req_… id
    key_id                TEXT,              -- usage rows: the secret key that spent it
    created_at            BIGINT NOT NULL
);
CREATE INDEX transactions_org_seq ON transactions (org_id, seq);
CREATE INDEX transactions_org_created ON transactions (org_id, created_at);

-- What each key spent per UTC day (`d:2026-11-22`) and month (`m:2026-11`), for budgets and
-- the keys list; written in the same transaction as the usage rows.
CREATE TABLE key_spend (
    key_id  TEXT NOT NULL,
    period  TEXT NOT NULL,
    micros  BIGINT NOT NULL,
    PRIMARY KEY (key_id, period)
);
