-- Who changed a job, and what the system did to it: one row per change
-- (create, update, enable, disable, retry, run-now, delete) with its actor
-- (an API key's id, or "system" for auto-disable and provisioning), kept
-- as long as run history. No foreign key: the trail outlives the job.
CREATE TABLE cron_job_events (
    id          bigserial PRIMARY KEY,
    cron_job_id uuid NOT NULL,
    tenant_id   uuid NOT NULL,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text NOT NULL,
    action      text NOT NULL,
    version     bigint NOT NULL,
    detail      jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX cron_job_events_job ON cron_job_events (cron_job_id, id DESC);
CREATE INDEX cron_job_events_at ON cron_job_events (at);
