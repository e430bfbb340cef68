-- Issue #24: real payments (Stripe; docs/billing.md).
-- A credit or refund row made by a payment names it: the processor's payment id (a Stripe
-- PaymentIntent `pi_…`, the test processor's `ch_…`). Refunds and disputes find their top-up by it.
ALTER TABLE transactions ADD COLUMN payment_ref TEXT;
CREATE INDEX transactions_payment_ref ON transactions (payment_ref);

-- The processor's customer of each organization (a Stripe Customer `cus_…`), made on first use.
CREATE TABLE payment_customers (
    org_id       TEXT NOT NULL REFERENCES orgs (id),
    provider     TEXT NOT NULL,
    customer_id  TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (org_id, provider)
);
CREATE UNIQUE INDEX payment_customers_customer ON payment_customers (provider, customer_id);

-- Each processor event (a Stripe `evt_…`) handled: a second delivery of one is answered and
-- changes nothing.
CREATE TABLE payment_events (
    id           TEXT PRIMARY KEY,
    type         TEXT NOT NULL,
    received_at  BIGINT NOT NULL
);
