-- Issue #22: active health checks of deployments (docs/routing.md, "Health checks").
-- One row per health-checked deployment (model id, `<provider>/<upstream>`), shared by every
-- instance: the lease holder (`lease_owner` until `lease_expires_at`, wall-clock microseconds)
-- runs the check and writes the outcome; every instance reads `healthy` each interval.
-- `since`: when the current state (healthy or not) began. The counts are consecutive outcomes
-- (a success clears the failures and the other way round).
CREATE TABLE endpoint_health (
    model                  TEXT NOT NULL,
    deployment             TEXT NOT NULL,
    healthy                BOOLEAN NOT NULL,
    consecutive_failures   INTEGER NOT NULL,
    consecutive_successes  INTEGER NOT NULL,
    since                  BIGINT NOT NULL,
    last_error             TEXT,
    last_checked_at        BIGINT,
    lease_owner            TEXT,
    lease_expires_at       BIGINT,
    updated_at             BIGINT NOT NULL,
    PRIMARY KEY (model, deployment)
);
