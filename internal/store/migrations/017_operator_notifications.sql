-- Operator notifications (issue 15): shard-level events for the platform's
-- operators (platform_error, node_not_converged, slots_unrun), delivered by
-- the same worker as tenant notifications.
--
-- An operator target, event and delivery has no tenant (tenant_id NULL):
-- the worker's per-tenant caps and the e-mail rate windows group by tenant,
-- so operator deliveries form their own group and never take a tenant's
-- share. No tenant query can match a NULL tenant_id, so tenant keys never
-- see them.

-- shard_id: NULL, every shard; else only that shard's events. Only
-- operator targets have one; only tenant targets have a job.
ALTER TABLE notification_targets
    ALTER COLUMN tenant_id DROP NOT NULL,
    ADD COLUMN shard_id uuid REFERENCES shards(id) ON DELETE CASCADE,
    ADD CONSTRAINT notification_targets_operator_scope
        CHECK (tenant_id IS NOT NULL OR cron_job_id IS NULL),
    ADD CONSTRAINT notification_targets_tenant_scope
        CHECK (tenant_id IS NULL OR shard_id IS NULL);
CREATE INDEX notification_targets_operator ON notification_targets (created_at, id) WHERE tenant_id IS NULL;

-- An operator event is about a shard, not a job: run_key holds its
-- aggregation key (kind and window start), unique per shard, so a
-- shard-wide fault makes one event per window, whose payload counts the
-- occurrences. The UNIQUE (cron_job_id, kind, run_key) of 013 does not
-- apply to it (cron_job_id NULL).
ALTER TABLE notification_events
    ALTER COLUMN tenant_id DROP NOT NULL,
    ALTER COLUMN cron_job_id DROP NOT NULL,
    ADD COLUMN shard_id uuid,
    -- NOT VALID: checked for every new row, without scanning the events
    -- already there under this migration's lock (they all have a tenant
    -- and a job: both were NOT NULL).
    ADD CONSTRAINT notification_events_scope
        CHECK ((tenant_id IS NULL) = (cron_job_id IS NULL) AND (cron_job_id IS NOT NULL OR shard_id IS NOT NULL)) NOT VALID;
CREATE UNIQUE INDEX notification_events_operator ON notification_events (shard_id, kind, run_key) WHERE cron_job_id IS NULL;

ALTER TABLE notification_deliveries ALTER COLUMN tenant_id DROP NOT NULL;

-- A node's convergence, as the ConvergeNode workflow reports it: the last
-- success, the last failure and its error. node_not_converged reads them.
-- converge_watched_from is when its converges began to be recorded: its
-- creation, or for the nodes that exist now this migration (so an upgrade
-- does not report every node as never converged before the next periodic
-- converge has had its chance).
ALTER TABLE nodes
    ADD COLUMN converged_at          timestamptz,
    ADD COLUMN converge_failed_at    timestamptz,
    ADD COLUMN converge_error        text NOT NULL DEFAULT '',
    ADD COLUMN converge_watched_from timestamptz NOT NULL DEFAULT now();
