-- Catch-up (issue 14): a job's catch-up window, and runs whose trigger is
-- not their run key's. A catch-up of slot S is S's run, under S's
-- scheduled key (so the slot stamp and the one record per key keep it
-- single), but it says trigger "catchup".

-- 0: a missed slot never runs (cron's rule, and every job's until now).
ALTER TABLE cron_jobs
    ADD COLUMN catchup_window_seconds integer NOT NULL DEFAULT 0
        CHECK (catchup_window_seconds BETWEEN 0 AND 86400);

-- The trigger column (012) was the key's middle part, generated. It keeps
-- its values and becomes a stored column; a writer that does not set it
-- (the sweeper's lost rows, an older replica during a rolling deploy)
-- still gets the key's part, from the function below. The check keeps it
-- the key's except catchup on a scheduled key.
ALTER TABLE cron_job_runs ALTER COLUMN trigger DROP EXPRESSION;

CREATE FUNCTION cron_job_runs_trigger_from_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.trigger IS NULL THEN
        NEW.trigger := split_part(NEW.run_key, '#', 2);
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER cron_job_runs_trigger_from_key BEFORE INSERT ON cron_job_runs
    FOR EACH ROW EXECUTE FUNCTION cron_job_runs_trigger_from_key();

-- NOT VALID: checking the existing rows (the generated column's, so they
-- hold) would scan the whole history holding ACCESS EXCLUSIVE, stopping
-- every outcome and runs read meanwhile; 023 validates it under a lock
-- that lets them through. The check also stands for NOT NULL, which
-- would scan the same way.
ALTER TABLE cron_job_runs
    ADD CONSTRAINT cron_job_runs_trigger_of_key CHECK (
        trigger IS NOT NULL AND (
            trigger = split_part(run_key, '#', 2)
            OR (trigger = 'catchup' AND split_part(run_key, '#', 2) = 'scheduled'))) NOT VALID;
