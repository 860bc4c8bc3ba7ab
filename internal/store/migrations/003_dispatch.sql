-- Dispatch with several core-api replicas, and nodes that leave.

-- Outbox rows are leased (claimed_until) by one dispatcher at a time, and a
-- row whose signal fails backs off on its own (attempts, next_attempt_at)
-- instead of stalling every other job.
ALTER TABLE cron_job_tasks
    ADD COLUMN attempts        integer NOT NULL DEFAULT 0,
    ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN claimed_until   timestamptz,
    ADD COLUMN last_error      text NOT NULL DEFAULT '';
CREATE INDEX cron_job_tasks_job_pending ON cron_job_tasks (cron_job_id, id) WHERE dispatched_at IS NULL;
CREATE INDEX cron_job_tasks_dispatched ON cron_job_tasks (dispatched_at) WHERE dispatched_at IS NOT NULL;

-- A draining node gets no new provisioning; provisioning stops waiting for it.
ALTER TABLE nodes ADD COLUMN draining boolean NOT NULL DEFAULT false;

-- A removed node keeps its run history, without the link.
ALTER TABLE cron_job_runs DROP CONSTRAINT cron_job_runs_node_id_fkey,
    ADD CONSTRAINT cron_job_runs_node_id_fkey FOREIGN KEY (node_id) REFERENCES nodes(id) ON DELETE SET NULL;
