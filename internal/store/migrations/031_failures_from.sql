-- The failure counter's window starts at the last enable or retry that
-- lifted a disable: by run id (failures_after_run, 002) and now also by
-- the run's own start. A run in flight when the job was auto-disabled (or
-- a run-now of the disabled job) that reports after the tenant enabled the
-- job again was recorded after the enable and counted against the job the
-- tenant had just enabled: with max_failures 1 its old failure disabled
-- the job again at once. Now it counts neither way (store.recountSQL): a
-- run of a slot before failures_from, or a run-now whose request
-- (cron_job_tasks' id, the run key's request) is at most
-- failures_after_request, the last task id allocated when the lift
-- committed. Run-nows go by their request, not their scheduled_at, which
-- is the node's clock. '-infinity' and 0 for every job until its next such
-- lift: the window as before.
SET LOCAL lock_timeout = '5s';

ALTER TABLE cron_jobs
    ADD COLUMN failures_from timestamptz NOT NULL DEFAULT '-infinity',
    ADD COLUMN failures_after_request bigint NOT NULL DEFAULT 0;
