-- Cancelling a run (issue 14): a tenant's request to stop one run travels
-- through the outbox like any other change, with the run's key, and the
-- run it stopped is recorded as cancelled (counted neither way).
ALTER TABLE cron_job_runs DROP CONSTRAINT cron_job_runs_result_check;
ALTER TABLE cron_job_runs ADD CONSTRAINT cron_job_runs_result_check
    CHECK (result IN ('success', 'exit_code', 'signal', 'timeout', 'oom', 'overlap_skipped', 'failed', 'lost',
                      'platform_error', 'cancelled'));

ALTER TABLE cron_job_tasks DROP CONSTRAINT cron_job_tasks_action_check;
ALTER TABLE cron_job_tasks ADD CONSTRAINT cron_job_tasks_action_check
    CHECK (action IN ('create', 'update', 'delete', 'enable', 'disable', 'auto_disable', 'retry', 'run_now', 'cancel'));
-- the run a cancel task stops; '' for every other action
ALTER TABLE cron_job_tasks ADD COLUMN run_key text NOT NULL DEFAULT '';
