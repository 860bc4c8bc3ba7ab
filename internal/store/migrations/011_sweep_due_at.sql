-- sweep_due_at: when the lost-run sweep next has work for this job. It is
-- the end (slot + timeout_seconds) of the job's earliest slot after where
-- its sweep stands (swept_until, never before not_before); the sweep takes
-- the job up once that is a grace period ago. NULL: nothing to sweep (not
-- enabled, not active or failed, or no node has had its schedule yet). A
-- pass reads only the due jobs through the index below instead of visiting
-- every active job (docs/semantics.md, "Lost runs").
--
-- The sweep writes the exact value (computed with the schedule in Go).
-- Every other write that moves what it depends on (swept_until, not_before,
-- schedule, timezone, timeout_seconds, enabled, status; updated_at while
-- swept_until is NULL) gets a lower bound from the trigger below: the
-- first slot after swept_until ends no earlier than swept_until +
-- timeout_seconds, so the job is visited early, never late, and the visit
-- stores the exact value. A trigger rather than each statement, so that
-- writes of replicas from before this migration (a rolling deploy: they
-- set swept_until at provisioning, outcomes and in their own sweep) and
-- writes added later keep the column right.
ALTER TABLE cron_jobs ADD COLUMN sweep_due_at timestamptz;

CREATE FUNCTION cron_jobs_sweep_due_bound(j cron_jobs) RETURNS timestamptz LANGUAGE sql IMMUTABLE AS $$
    -- An active job with a NULL swept_until was made active by a replica
    -- from before migration 005: the sweep reads it from its verdict
    -- (updated_at), if its shard has a node (sweepFrom in
    -- internal/store/sweep.go decides at the visit).
    SELECT CASE WHEN j.enabled AND j.status IN ('active', 'failed') AND (j.swept_until IS NOT NULL OR j.status = 'active')
           THEN greatest(coalesce(j.swept_until, j.updated_at), j.not_before) + make_interval(secs => j.timeout_seconds)
           END
$$;

CREATE FUNCTION cron_jobs_set_sweep_due() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        -- The statement wrote sweep_due_at itself (the sweep: its value is
        -- always later than the one it replaces).
        IF NEW.sweep_due_at IS DISTINCT FROM OLD.sweep_due_at THEN
            RETURN NEW;
        END IF;
        IF (NEW.swept_until, NEW.not_before, NEW.schedule, NEW.timezone, NEW.timeout_seconds, NEW.enabled, NEW.status,
            CASE WHEN NEW.swept_until IS NULL THEN NEW.updated_at END)
           IS NOT DISTINCT FROM
           (OLD.swept_until, OLD.not_before, OLD.schedule, OLD.timezone, OLD.timeout_seconds, OLD.enabled, OLD.status,
            CASE WHEN OLD.swept_until IS NULL THEN OLD.updated_at END) THEN
            RETURN NEW;
        END IF;
    END IF;
    NEW.sweep_due_at := cron_jobs_sweep_due_bound(NEW);
    RETURN NEW;
END
$$;
CREATE TRIGGER cron_jobs_sweep_due BEFORE INSERT OR UPDATE ON cron_jobs
    FOR EACH ROW EXECUTE FUNCTION cron_jobs_set_sweep_due();

-- Existing rows: the lower bound; the first pass stores the exact value.
-- (The trigger does not fire here: sweep_due_at is written.)
UPDATE cron_jobs j SET sweep_due_at = cron_jobs_sweep_due_bound(j) WHERE cron_jobs_sweep_due_bound(j) IS NOT NULL;

CREATE INDEX cron_jobs_sweep_due ON cron_jobs (sweep_due_at, id) WHERE sweep_due_at IS NOT NULL;
