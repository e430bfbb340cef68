-- Fine-tuning jobs (storage/fine_tuning.py, actors/fine_tuning/, gateway/fine_tuning/): one row
-- per job, the job's events, and the watcher's lease on the job row.
--
-- A job runs at a provider; `provider_job_id` (and the uploaded files' ids) are stored as soon
-- as they are known, so a watcher that resumes after a restart never uploads or creates twice.
-- Training is paid for with a hold in the ledger (a `usage` row at creation, `hold_txn_id`),
-- settled or released in the same transaction as the job's terminal state (docs/fine_tuning.md).
CREATE TABLE fine_tuning_jobs (
    id                       TEXT PRIMARY KEY,          -- ftjob_<24 base62>
    org_id                   TEXT NOT NULL REFERENCES orgs (id),
    model                    TEXT NOT NULL,             -- the base model as the client named it
    provider                 TEXT NOT NULL,             -- [[providers]] name
    upstream_model           TEXT NOT NULL,             -- the base model's name at the provider
    training_file            TEXT NOT NULL,             -- our file id
    validation_file          TEXT,
    n_epochs                 INTEGER NOT NULL,          -- effective hyperparameters
    batch_size               INTEGER NOT NULL,
    learning_rate_multiplier TEXT NOT NULL,             -- decimal text: exact as given
    suffix                   TEXT,
    seed                     BIGINT NOT NULL,
    status                   TEXT NOT NULL,             -- the API's states only
    fine_tuned_model         TEXT,                      -- ft:<base>:<org>:<suffix>:<id>
    provider_job_id          TEXT,                      -- the provider's ftjob id
    provider_training_file   TEXT,                      -- the provider's file ids
    provider_validation_file TEXT,
    provider_model           TEXT,                      -- the provider's fine-tuned model id
    dataset_tokens           BIGINT,                    -- counted by our validation
    trained_tokens           BIGINT,                    -- dataset tokens x n_epochs (ours)
    error_code               TEXT,
    error_message            TEXT,
    error_param              TEXT,
    byok                     BOOLEAN NOT NULL,          -- run with the org's own provider key
    training_usd_per_mtok    TEXT,                      -- the price and fee at creation
    fee_percent              TEXT NOT NULL,
    hold_micros              BIGINT NOT NULL,           -- held at creation (0: nothing held)
    charged_micros           BIGINT,                    -- what the job cost in the end
    billing                  TEXT NOT NULL,             -- held | settled | released | none
    provider_cancel          BOOLEAN NOT NULL,          -- cancelled here, not yet at the provider
    estimated_finish         BIGINT NOT NULL,           -- µs
    created_at               BIGINT NOT NULL,           -- µs
    updated_at               BIGINT NOT NULL,
    finished_at              BIGINT,
    lease_owner              TEXT,                      -- the instance watching the job
    lease_expires_at         BIGINT
);
CREATE INDEX fine_tuning_jobs_org ON fine_tuning_jobs (org_id, created_at);
CREATE INDEX fine_tuning_jobs_open ON fine_tuning_jobs (status, lease_expires_at);

-- One row per state change or notice, written in the transaction that changed the job row
-- (so per job, `seq` order is commit order: the row lock serialises writers).
CREATE TABLE fine_tuning_events (
    seq         {{serial_pk}},
    id          TEXT NOT NULL UNIQUE,                  -- ftevent_<24 base62>
    job_id      TEXT NOT NULL REFERENCES fine_tuning_jobs (id),
    org_id      TEXT NOT NULL,
    level       TEXT NOT NULL,                         -- info | warn | error
    message     TEXT NOT NULL,
    data        TEXT,                                  -- JSON object or NULL
    created_at  BIGINT NOT NULL                        -- µs
);
CREATE INDEX fine_tuning_events_job ON fine_tuning_events (job_id, seq);
