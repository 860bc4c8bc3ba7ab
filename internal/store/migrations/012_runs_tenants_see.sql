-- Runs tenants can see (issue 14): a job's name and latest run, a disable
-- reason, and each run's trigger and attempt, with the indexes the run
-- and job listings page by.

ALTER TABLE cron_jobs
    -- for people only; never sent to nodes
    ADD COLUMN name text NOT NULL DEFAULT '',
    -- the tenant's reason of the last disable; cleared when the job is
    -- enabled again
    ADD COLUMN disabled_reason text NOT NULL DEFAULT '',
    -- the newest recorded run a node reported (highest scheduled_at, then
    -- id), kept by outcome recording in the same transaction
    -- (decideLastRun): NULL until the first
    ADD COLUMN last_run_id bigint,
    ADD COLUMN last_run_at timestamptz,
    ADD COLUMN last_result text,
    ADD COLUMN last_failure_reason text NOT NULL DEFAULT '',
    ADD COLUMN last_success_at timestamptz;

-- Existing jobs start from their history: the newest run that is not a
-- sweeper's lost record, and the newest success.
UPDATE cron_jobs j SET last_run_id = r.id, last_run_at = r.scheduled_at, last_result = r.result,
       last_failure_reason = CASE WHEN r.result = 'success' THEN '' ELSE r.failure_reason END
FROM (SELECT DISTINCT ON (cron_job_id) cron_job_id, id, scheduled_at, result, failure_reason
      FROM cron_job_runs WHERE result <> 'lost'
      ORDER BY cron_job_id, scheduled_at DESC, id DESC) r
WHERE r.cron_job_id = j.id;
UPDATE cron_jobs j SET last_success_at = s.at
FROM (SELECT cron_job_id, max(scheduled_at) AS at FROM cron_job_runs WHERE result = 'success'
      GROUP BY cron_job_id) s
WHERE s.cron_job_id = j.id;

-- Every run says its trigger: the run key's middle part, so it can never
-- disagree with the key, whichever writer (a node's outcome, the sweeper,
-- an older replica during a rolling deploy) inserted the row.
ALTER TABLE cron_job_runs
    ADD COLUMN trigger text GENERATED ALWAYS AS (split_part(run_key, '#', 2)) STORED,
    -- 1 until retries exist
    ADD COLUMN attempt integer NOT NULL DEFAULT 1 CHECK (attempt >= 1);

-- The runs listing pages by (scheduled_at, id), newest first, optionally
-- of one result or trigger; this index supersedes (cron_job_id,
-- scheduled_at DESC).
CREATE INDEX cron_job_runs_page ON cron_job_runs (cron_job_id, scheduled_at DESC, id DESC);
DROP INDEX IF EXISTS cron_job_runs_job;
CREATE INDEX cron_job_runs_result_page ON cron_job_runs (cron_job_id, result, scheduled_at DESC, id DESC);
CREATE INDEX cron_job_runs_trigger_page ON cron_job_runs (cron_job_id, trigger, scheduled_at DESC, id DESC);

-- The jobs listing pages by (created_at, id), optionally of one status;
-- a tenant has at most 1000 jobs, so one index on the order serves both.
CREATE INDEX cron_jobs_tenant_page ON cron_jobs (tenant_id, created_at, id);
DROP INDEX IF EXISTS cron_jobs_tenant;
