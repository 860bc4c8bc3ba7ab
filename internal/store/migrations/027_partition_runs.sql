-- Run history partitioned by month of the slot (issue 16): retention drops
-- whole months instead of deleting rows one batch at a time, and a month's
-- indexes stay the size of a month. docs/scale.md, "Run history at 10
-- million runs", says why by month, and what this migration costs on a
-- big history (it rewrites the table under ACCESS EXCLUSIVE).
--
-- Every unique key of a partitioned table holds its partition key: a
-- run's identity is (run_key, scheduled_at), its record (id,
-- scheduled_at). That is still one row per run key because scheduled_at
-- is the key's own slot for every key that names one (scheduled, catch-up,
-- retry, backfill: the outcome endpoint refuses any other, and the
-- sweeper writes the key's slot), and a manual run's is its request's
-- time, which the core sent with the request; and an outcome reads the
-- key in all months under the job's row lock before it inserts
-- (lockForOutcome), which holds a manual key to one row whatever time a
-- report carries. The sweeper writes only scheduled keys. The ids, and
-- their sequence, are kept: the API shows them.

LOCK TABLE cron_job_runs IN ACCESS EXCLUSIVE MODE;
ALTER TABLE cron_job_runs RENAME TO cron_job_runs_unpartitioned;

CREATE TABLE cron_job_runs (
    id                   bigint NOT NULL DEFAULT nextval('cron_job_runs_id_seq'),
    run_key              text NOT NULL,
    cron_job_id          uuid NOT NULL,
    version              bigint NOT NULL,
    node_id              uuid CONSTRAINT cron_job_runs_node_fkey REFERENCES nodes(id) ON DELETE SET NULL,
    scheduled_at         timestamptz NOT NULL,
    started_at           timestamptz,
    finished_at          timestamptz,
    duration_ms          bigint,
    result               text NOT NULL CONSTRAINT cron_job_runs_result_check
        CHECK (result IN ('success', 'exit_code', 'signal', 'timeout', 'oom', 'overlap_skipped', 'failed', 'lost',
                          'platform_error', 'cancelled')),
    exit_code            integer,
    signal               text,
    failure_reason       text NOT NULL DEFAULT '',
    received_at          timestamptz NOT NULL DEFAULT now(),
    trigger              text,
    attempt              integer NOT NULL DEFAULT 1 CONSTRAINT cron_job_runs_attempt_check CHECK (attempt >= 1),
    cpu_seconds          double precision,
    peak_memory_bytes    bigint,
    warnings             text[] NOT NULL DEFAULT '{}',
    invocation_id        text NOT NULL DEFAULT '',
    output_tail          text,
    output_truncated     boolean NOT NULL DEFAULT false,
    output_dropped_bytes bigint NOT NULL DEFAULT 0,
    superseded           boolean NOT NULL DEFAULT false,
    retry_key            text,
    retry_due_at         timestamptz,
    CONSTRAINT cron_job_runs_trigger_of_key CHECK (
        trigger IS NOT NULL AND (
            trigger = split_part(run_key, '#', 2)
            OR (trigger = 'catchup' AND split_part(run_key, '#', 2) = 'scheduled')))
) PARTITION BY RANGE (scheduled_at);
COMMENT ON COLUMN cron_job_runs.run_key IS '{job}#{trigger}#{slot or request}[#…]; one row per run key (with its scheduled_at)';

-- A month for every month of the history (at most 13 back: older runs,
-- past any retention the product offers, wait in the default partition
-- for retention) up to 3 months ahead; housekeeping keeps creating them
-- ahead (EnsureRunPartitions). The default partition takes any run no
-- month holds, so no insert ever fails for want of a partition.
DO $$
DECLARE
    m date;
    first date := greatest(
        coalesce((SELECT date_trunc('month', min(scheduled_at) AT TIME ZONE 'UTC') FROM cron_job_runs_unpartitioned),
                 date_trunc('month', now() AT TIME ZONE 'UTC')),
        date_trunc('month', now() AT TIME ZONE 'UTC') - interval '13 months');
BEGIN
    FOR m IN SELECT generate_series(first, date_trunc('month', now() AT TIME ZONE 'UTC') + interval '3 months', interval '1 month')::date LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF cron_job_runs FOR VALUES FROM (%L) TO (%L)',
                       'cron_job_runs_' || to_char(m, 'YYYY_MM'),
                       m::timestamp AT TIME ZONE 'UTC', (m + interval '1 month')::timestamp AT TIME ZONE 'UTC');
    END LOOP;
END $$;
CREATE TABLE cron_job_runs_default PARTITION OF cron_job_runs DEFAULT;

-- Copy first, index after: building an index over a month is faster than
-- growing it row by row.
INSERT INTO cron_job_runs SELECT * FROM cron_job_runs_unpartitioned;
ALTER SEQUENCE cron_job_runs_id_seq OWNED BY cron_job_runs.id;
DROP TABLE cron_job_runs_unpartitioned;

ALTER TABLE cron_job_runs ADD CONSTRAINT cron_job_runs_pkey PRIMARY KEY (id, scheduled_at);
ALTER TABLE cron_job_runs ADD CONSTRAINT cron_job_runs_run_key_key UNIQUE (run_key, scheduled_at);
CREATE INDEX cron_job_runs_page ON cron_job_runs (cron_job_id, scheduled_at DESC, id DESC);
CREATE INDEX cron_job_runs_result_page ON cron_job_runs (cron_job_id, result, scheduled_at DESC, id DESC);
CREATE INDEX cron_job_runs_trigger_page ON cron_job_runs (cron_job_id, trigger, scheduled_at DESC, id DESC);
CREATE INDEX cron_job_runs_retention ON cron_job_runs (received_at);
CREATE INDEX cron_job_runs_retry_pending ON cron_job_runs (retry_due_at) WHERE retry_due_at IS NOT NULL;

CREATE TRIGGER cron_job_runs_trigger_from_key BEFORE INSERT ON cron_job_runs
    FOR EACH ROW EXECUTE FUNCTION cron_job_runs_trigger_from_key();
