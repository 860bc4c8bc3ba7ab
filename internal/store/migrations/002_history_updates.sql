-- hostcron schema, version 2: a true run history and safe updates.

-- platform_error is recorded (never counted against the tenant).
ALTER TABLE cron_job_runs DROP CONSTRAINT cron_job_runs_result_check;
ALTER TABLE cron_job_runs ADD CONSTRAINT cron_job_runs_result_check
    CHECK (result IN ('success', 'exit_code', 'signal', 'timeout', 'oom', 'overlap_skipped', 'failed', 'lost',
                      'platform_error'));
-- run_key is {job}#scheduled#{slot} or {job}#manual#{request}: one row per
-- run whatever the version, which is a column beside it.
COMMENT ON COLUMN cron_job_runs.run_key IS '{job}#scheduled#{slot} or {job}#manual#{request}; unique per run';

ALTER TABLE cron_jobs
    -- the runner on the node refuses slots before this: set at create,
    -- enable and any schedule or time zone change
    ADD COLUMN not_before timestamptz NOT NULL DEFAULT now(),
    -- runs with a higher id count towards consecutive_failures; enable and
    -- retry move it past every run recorded so far
    ADD COLUMN failures_after_run bigint NOT NULL DEFAULT 0;

-- A retried create with the same Idempotency-Key returns the first job.
CREATE TABLE idempotency_keys (
    tenant_id    uuid NOT NULL REFERENCES tenants(id),
    key          text NOT NULL,
    request_hash bytea NOT NULL,
    cron_job_id  uuid REFERENCES cron_jobs(id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);
CREATE INDEX idempotency_keys_age ON idempotency_keys (tenant_id, created_at);
