-- A deleted job's run history outlives the job (issue 14): once its units
-- are gone from every node, the job's row goes, but its runs stay for the
-- run retention, readable by its tenant under the job's id. The tombstone
-- is what is left of the job: whose it was (the runs API checks the
-- tenant against it, as it checks a live job's), its name, its last
-- version (a late outcome is held to it, as to a live job's) and when it
-- went. Housekeeping prunes a tombstone with the run retention once none
-- of its runs is left. A job id is never reused (gen_random_uuid in
-- cron_jobs), so a tombstone never names a live job.
CREATE TABLE deleted_cron_jobs (
    id         uuid PRIMARY KEY,
    tenant_id  uuid NOT NULL REFERENCES tenants(id),
    name       text NOT NULL DEFAULT '',
    version    bigint NOT NULL,
    created_at timestamptz NOT NULL,
    deleted_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX deleted_cron_jobs_deleted_at ON deleted_cron_jobs (deleted_at);

-- The runs stay when the row goes: the cascade of 001 deleted them with
-- it. No foreign key to the tombstone either: a run is written in the
-- outcome's transaction against a locked job row (or tombstone), and
-- retention prunes runs and tombstones on their own.
ALTER TABLE cron_job_runs DROP CONSTRAINT cron_job_runs_cron_job_id_fkey;
