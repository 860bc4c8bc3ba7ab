-- The row triggers of cron_jobs (cron_jobs_rev, 004; cron_jobs_sweep_due,
-- 011) fired on every UPDATE and returned early for most: a plpgsql call
-- per row for each. The lost-run sweep's write (swept_until and
-- sweep_due_at of every due job, 100,000 rows when a backlog is due) and
-- the outcome's cursor move need neither. The same checks as the
-- functions' early returns, as WHEN conditions, keep PostgreSQL from
-- calling them at all; INSERT and UPDATE are separate triggers, as WHEN
-- may name OLD only on UPDATE. The functions do not change, and with them
-- every value written: a WHEN that lets a row through reaches the same
-- branch of the function as before, and a row it holds back is one the
-- function returned unchanged (TestCronJobsTriggersWhenKeepValues).
--
-- Rolling deploy: the triggers are the table's, so writes of replicas from
-- before this migration get exactly the values they got before. The swap
-- is one transaction (tern's), so no write sees the table without them.
-- BEFORE triggers of one event fire in name order: rev before sweep_due,
-- as before (sweep_due does not read rev, nor rev the sweep columns).
--
-- DROP TRIGGER takes ACCESS EXCLUSIVE on cron_jobs until the commit: behind
-- a long transaction of a running replica (a sweep batch, a converge's
-- read) every later read and write of the table would queue behind this
-- migration. It gives up after 5 s instead; core-api then fails to start
-- and its restart tries again.
SET LOCAL lock_timeout = '5s';
DROP TRIGGER cron_jobs_rev ON cron_jobs;
DROP TRIGGER cron_jobs_sweep_due ON cron_jobs;

CREATE TRIGGER cron_jobs_rev_insert BEFORE INSERT ON cron_jobs
    FOR EACH ROW EXECUTE FUNCTION cron_jobs_set_rev();
-- A new version gets the writing transaction (cron_jobs_set_rev).
CREATE TRIGGER cron_jobs_rev_update BEFORE UPDATE ON cron_jobs
    FOR EACH ROW WHEN (NEW.version IS DISTINCT FROM OLD.version)
    EXECUTE FUNCTION cron_jobs_set_rev();

CREATE TRIGGER cron_jobs_sweep_due_insert BEFORE INSERT ON cron_jobs
    FOR EACH ROW EXECUTE FUNCTION cron_jobs_set_sweep_due();
-- cron_jobs_set_sweep_due's two early returns on UPDATE, negated: the
-- statement did not write sweep_due_at itself (the sweep and the outcome's
-- cursor move do), and it changed something the bound depends on.
CREATE TRIGGER cron_jobs_sweep_due_update BEFORE UPDATE ON cron_jobs
    FOR EACH ROW WHEN (NEW.sweep_due_at IS NOT DISTINCT FROM OLD.sweep_due_at
        AND (NEW.swept_until, NEW.not_before, NEW.schedule, NEW.timezone, NEW.timeout_seconds, NEW.enabled, NEW.status,
             CASE WHEN NEW.swept_until IS NULL THEN NEW.updated_at END)
            IS DISTINCT FROM
            (OLD.swept_until, OLD.not_before, OLD.schedule, OLD.timezone, OLD.timeout_seconds, OLD.enabled, OLD.status,
             CASE WHEN OLD.swept_until IS NULL THEN OLD.updated_at END))
    EXECUTE FUNCTION cron_jobs_set_sweep_due();
