-- A tenant's run-now and backfill requests are bounded (quota
-- run_now_per_minute): each queues a run on every node of the shard and a
-- workflow in Temporal, whatever the job's schedule allows. The bucket of
-- what a tenant has left lives here, not in a core-api's memory, so that
-- replicas share one limit and a restart does not refill it; a request
-- takes its token under the row's lock (store.takeRunNow), and the
-- decision is quota.TakeRunNow's.
SET LOCAL lock_timeout = '5s';

ALTER TABLE tenant_quotas ADD COLUMN run_now_per_minute integer CHECK (run_now_per_minute >= 0);

CREATE TABLE tenant_run_now_buckets (
    tenant_id uuid PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    tokens    double precision NOT NULL,
    taken_at  timestamptz NOT NULL
);
