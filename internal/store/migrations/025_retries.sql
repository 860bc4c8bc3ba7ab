-- Backfill and retries (issue 14). A backfill's and a retry's run key name
-- their slot (job#backfill#slot#request, job#retry#slot#attempt); their
-- middle part is their trigger, so 022's check holds them as it is.

-- A failed scheduled run is retried up to `retries` times, the first
-- retry_delay_seconds after the failure is recorded, each later one twice
-- as long after the one before (capped at 6 h; wire.MaxRetryBackoffSec).
ALTER TABLE cron_jobs
    ADD COLUMN retries integer NOT NULL DEFAULT 0 CHECK (retries BETWEEN 0 AND 10),
    ADD COLUMN retry_delay_seconds integer NOT NULL DEFAULT 60 CHECK (retry_delay_seconds BETWEEN 1 AND 3600);

-- superseded: a failed attempt the core queued a retry for (retry_key,
-- due to start at retry_due_at), or whose retry reported a result: it
-- counts towards consecutive failures no more, the last attempt of its
-- slot does. retry_due_at stays set while the retry has not reported; the
-- sweep clears superseded when a retry never reported in time (it was
-- dropped, or its node died), so the failure counts again.
ALTER TABLE cron_job_runs
    ADD COLUMN superseded boolean NOT NULL DEFAULT false,
    ADD COLUMN retry_key text,
    ADD COLUMN retry_due_at timestamptz;
CREATE INDEX cron_job_runs_retry_pending ON cron_job_runs (retry_due_at) WHERE retry_due_at IS NOT NULL;

-- A task that must not be sent before not_before (a retry's delay). It
-- never holds up the job's other tasks meanwhile (ClaimTasks skips it), and
-- one retry of one attempt is one task: the key is unique among run-now
-- tasks (a duplicate outcome, a second replica queue nothing more).
ALTER TABLE cron_job_tasks ADD COLUMN not_before timestamptz;
CREATE UNIQUE INDEX cron_job_tasks_run_once ON cron_job_tasks (run_key) WHERE action = 'run_now' AND run_key <> '';

-- Every run says its attempt: the retry key's last part, whichever writer
-- inserts the row (a node's outcome, the sweeper, an older replica).
CREATE OR REPLACE FUNCTION cron_job_runs_trigger_from_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.trigger IS NULL THEN
        NEW.trigger := split_part(NEW.run_key, '#', 2);
    END IF;
    IF split_part(NEW.run_key, '#', 2) = 'retry' THEN
        NEW.attempt := split_part(NEW.run_key, '#', 4)::integer;
    END IF;
    RETURN NEW;
END $$;
