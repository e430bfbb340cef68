-- Issue #23: the opt-in guardrails (`opt_in = true` in [[guardrails]]) an organization turned
-- on (PUT /v1/guardrails/{name}; docs/guardrails.md, "Opt-in guardrails"). A row: on.
CREATE TABLE org_guardrails (
    org_id     TEXT NOT NULL,
    guardrail  TEXT NOT NULL,
    enabled_at BIGINT NOT NULL,
    PRIMARY KEY (org_id, guardrail)
);
