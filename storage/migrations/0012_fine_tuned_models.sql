-- Fine-tuned models (storage/fine_tuned_models.py, gateway/inference/): what a succeeded
-- fine-tuning job produced, routable by its `ft:` name for its organization only. A row is
-- written once by the job watcher; DELETE /v1/models/{id} marks it deleted (the name is never
-- reused: a later registration of the same id stays a no-op).
CREATE TABLE fine_tuned_models (
    id              TEXT PRIMARY KEY,        -- ft:<base_model>:<org>:<suffix>:<id>
    org_id          TEXT NOT NULL REFERENCES orgs (id),
    provider        TEXT NOT NULL,           -- [[providers]] name that trained it
    upstream_model  TEXT NOT NULL,           -- the provider's own id for the model
    base_model      TEXT NOT NULL,           -- the client-facing base model (prices)
    job_id          TEXT NOT NULL,           -- the fine-tuning job that produced it
    created_at      BIGINT NOT NULL,         -- µs
    deleted_at      BIGINT                   -- µs; set by DELETE /v1/models/{id}
);
CREATE INDEX fine_tuned_models_org_created ON fine_tuned_models (org_id, created_at, id);
