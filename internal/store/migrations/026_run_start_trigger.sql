-- A run in progress says its trigger (issue 14): a catch-up runs under its
-- slot's scheduled key, so only the node's word tells it apart. Empty for
-- starts of older nodes, which then show the key's trigger.
ALTER TABLE cron_job_run_starts ADD COLUMN trigger text NOT NULL DEFAULT '';
