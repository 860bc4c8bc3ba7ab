-- Runs in progress (issue 14): the node agent reports the run each of its
-- cron services runs (the runner's record says "ran"), so a tenant sees
-- the run as running before its outcome arrives. A start is display only:
-- the outcome (or the sweeper's lost record) is the run's record. A unit
-- runs one activation at a time, so a node holds at most one start per
-- job: a new one replaces it, and a tenant rewriting its record cannot
-- grow the table.
CREATE TABLE cron_job_run_starts (
    cron_job_id   uuid NOT NULL,
    node_id       uuid NOT NULL,
    run_key       text NOT NULL,
    scheduled_at  timestamptz NOT NULL,
    started_at    timestamptz NOT NULL,
    invocation_id text NOT NULL DEFAULT '',
    received_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cron_job_id, node_id)
);
CREATE INDEX cron_job_run_starts_key ON cron_job_run_starts (run_key);
CREATE INDEX cron_job_run_starts_received ON cron_job_run_starts (received_at);
