-- Runs in progress (issue 14): the node agent reports each run its node
-- has started (the runner's record says "ran"), so a tenant sees the run
-- as running before its outcome arrives. A start is display only: the
-- outcome (or the sweeper's lost record) is the run's record; recording
-- it deletes the start.
CREATE TABLE cron_job_run_starts (
    run_key       text PRIMARY KEY,
    cron_job_id   uuid NOT NULL,
    node_id       uuid,
    scheduled_at  timestamptz NOT NULL,
    started_at    timestamptz NOT NULL,
    invocation_id text NOT NULL DEFAULT '',
    received_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX cron_job_run_starts_job ON cron_job_run_starts (cron_job_id, started_at);
