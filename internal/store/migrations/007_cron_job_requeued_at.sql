-- When the re-queue of a shard's failed jobs (a node's announce, drain or
-- delete: requeueFailed in internal/store/admin.go) last made this job
-- pending at a new version. An announce skips a job re-queued within
-- RequeueInterval, so an agent that crash-loops (Restart=always) cannot
-- bump a job's version, and queue a retry, at every start. NULL: never
-- re-queued (or re-queued before this migration, long enough ago).
ALTER TABLE cron_jobs ADD COLUMN requeued_at timestamptz;
