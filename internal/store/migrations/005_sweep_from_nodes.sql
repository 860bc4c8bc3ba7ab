-- swept_until NULL: no node has the job's current schedule yet (it was
-- created, enabled or rescheduled and no provisioning has reported a node
-- that took it), so the lost-run sweep has nothing to count. Provisioning
-- sets it when at least one node has the job; a create, an enable or a
-- schedule or time zone change clears it.
ALTER TABLE cron_jobs ALTER COLUMN swept_until DROP NOT NULL,
                      ALTER COLUMN swept_until DROP DEFAULT;

-- Rows waiting for their first provisioning after such a change (the rule
-- the code kept before: not_before at or past swept_until).
UPDATE cron_jobs SET swept_until = NULL WHERE status = 'pending' AND not_before >= swept_until;
