-- Rolling deploys across 005: a replica from before 005 (still running
-- while the new ones start) never writes NULL into swept_until itself, but
-- its provisioning verdict keeps a NULL it finds (its "not_before >=
-- swept_until" is unknown), so a job it makes active on a row a new
-- replica created or re-armed would stay unswept. The sweep of this
-- version therefore reads NULL on an *active* job as "from the verdict"
-- (updated_at) when its shard has a node (sweepFrom in
-- internal/store/sweep.go); new code never leaves an active job NULL
-- (docs/semantics.md, "Dispatch and replicas", rolling deploys).
--
-- Rows already active with NULL were written by 005's code for a
-- provisioning no node took (a shard without nodes, or a workflow worker
-- from before took) and may since have reached a node without a verdict:
-- their verdict time says nothing about when a node got them. Provision
-- them again (a new version and a retry task, as a re-queue does), so a
-- verdict of this version's rules decides: active with the sweep started,
-- or failed with no node.
WITH requeued AS (
    UPDATE cron_jobs SET status = 'pending', status_message = '', version = version + 1, updated_at = now()
    WHERE status = 'active' AND swept_until IS NULL
    RETURNING id, version
)
INSERT INTO cron_job_tasks (cron_job_id, action, version)
SELECT id, 'retry', version FROM requeued;
