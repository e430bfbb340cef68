-- Issue #23: traffic mirroring (docs/mirroring.md, storage/mirror_results.py). One row per
-- shadow call: a sampled request of `model` also sent, after its answer, to `shadow` (another
-- [[models]] id), with both sides' figures for the comparison GET /v1/admin/mirrors reads.
-- No text in clear: the shadow's answer is sealed under the master key (protocol/secretbox.py
-- MIRROR_ANSWERS, context (org id, id)); only whether the two answers' text is equal is kept
-- beside it. Rows older than the retention bound, or past the most recent N per (model,
-- shadow), are deleted periodically (actors/mirror.py MirrorRetention).
CREATE TABLE mirror_results (
    id                          TEXT PRIMARY KEY,   -- mir_<ordered id>
    org_id                      TEXT NOT NULL REFERENCES orgs (id),
    key_id                      TEXT,
    request_id                  TEXT NOT NULL,      -- the primary request's req_ id
    route                       TEXT NOT NULL,      -- chat, embeddings or responses
    model                       TEXT NOT NULL,      -- the primary model id the client named
    shadow                      TEXT NOT NULL,      -- the shadow model's [[models]] id
    created_at                  BIGINT NOT NULL,    -- µs, when the shadow call ended
    billed                      BOOLEAN NOT NULL,   -- the shadow call was charged to the org
    primary_latency_ms          DOUBLE PRECISION NOT NULL,
    primary_prompt_tokens       BIGINT NOT NULL,
    primary_completion_tokens   BIGINT NOT NULL,
    primary_cost_usd            DOUBLE PRECISION NOT NULL,
    outcome                     TEXT NOT NULL,      -- ok, or an error code (docs/mirroring.md)
    shadow_latency_ms           DOUBLE PRECISION NOT NULL,
    shadow_prompt_tokens        BIGINT NOT NULL,
    shadow_completion_tokens    BIGINT NOT NULL,
    shadow_cost_usd             DOUBLE PRECISION NOT NULL,
    answers_equal               BOOLEAN,            -- NULL: not comparable (a stream, an error)
    shadow_answer_sealed        TEXT                -- NULL: no answer, or over the size bound
);
CREATE INDEX mirror_results_pair ON mirror_results (model, shadow, created_at);
CREATE INDEX mirror_results_created ON mirror_results (created_at);
