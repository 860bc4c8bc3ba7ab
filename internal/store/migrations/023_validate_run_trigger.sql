-- Validates 022's check of the runs' trigger in a migration (and so a
-- transaction) of its own: VALIDATE CONSTRAINT scans the history under
-- SHARE UPDATE EXCLUSIVE, which lets outcomes and reads go on.
ALTER TABLE cron_job_runs VALIDATE CONSTRAINT cron_job_runs_trigger_of_key;
