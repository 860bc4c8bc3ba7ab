-- hostcron schema, version 1.

CREATE TABLE shards (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name            text NOT NULL UNIQUE,
    web_storage_dir text NOT NULL,          -- CephFS mount, e.g. /srv/shared/www
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE nodes (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    shard_id        uuid NOT NULL REFERENCES shards(id),
    name            text NOT NULL UNIQUE,
    credential_hash bytea NOT NULL UNIQUE,  -- sha256 of a 256-bit random token
    last_seen_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tenants (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text NOT NULL UNIQUE,
    shard_id    uuid NOT NULL REFERENCES shards(id),
    linux_user  text NOT NULL,
    linux_group text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE webroots (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id  uuid NOT NULL REFERENCES tenants(id),
    path       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, path)
);

CREATE TABLE api_keys (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    key_hash   bytea NOT NULL UNIQUE,
    scope      text NOT NULL CHECK (scope IN ('admin', 'tenant')),
    tenant_id  uuid REFERENCES tenants(id),
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK ((scope = 'tenant') = (tenant_id IS NOT NULL))
);

CREATE TABLE cron_jobs (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id            uuid NOT NULL REFERENCES tenants(id),
    webroot_id           uuid NOT NULL REFERENCES webroots(id),
    schedule             text NOT NULL,
    timezone             text NOT NULL DEFAULT 'UTC',
    command              text NOT NULL,
    working_directory    text NOT NULL DEFAULT '',
    enabled              boolean NOT NULL DEFAULT true,
    timeout_seconds      integer NOT NULL DEFAULT 300 CHECK (timeout_seconds BETWEEN 1 AND 86400),
    max_memory_mb        integer NOT NULL DEFAULT 256 CHECK (max_memory_mb BETWEEN 16 AND 65536),
    max_failures         integer NOT NULL DEFAULT 5 CHECK (max_failures BETWEEN 0 AND 1000),
    consecutive_failures integer NOT NULL DEFAULT 0,
    status               text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'active', 'disabled', 'auto_disabled', 'failed', 'deleting')),
    status_message       text NOT NULL DEFAULT '',
    version              bigint NOT NULL DEFAULT 1,
    -- slots up to here have been checked for a missing outcome
    swept_until          timestamptz NOT NULL DEFAULT now(),
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX cron_jobs_tenant ON cron_jobs (tenant_id, created_at);

CREATE TABLE cron_job_runs (
    id             bigserial PRIMARY KEY,
    run_key        text NOT NULL UNIQUE,           -- {job}#{slot}#{version}
    cron_job_id    uuid NOT NULL REFERENCES cron_jobs(id) ON DELETE CASCADE,
    version        bigint NOT NULL,
    node_id        uuid REFERENCES nodes(id),
    scheduled_at   timestamptz NOT NULL,
    started_at     timestamptz,
    finished_at    timestamptz,
    duration_ms    bigint,
    result         text NOT NULL
        CHECK (result IN ('success', 'exit_code', 'signal', 'timeout', 'oom', 'overlap_skipped', 'failed', 'lost')),
    exit_code      integer,
    signal         text,
    failure_reason text NOT NULL DEFAULT '',
    received_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX cron_job_runs_job ON cron_job_runs (cron_job_id, scheduled_at DESC);
CREATE INDEX cron_job_runs_retention ON cron_job_runs (received_at);

-- Transactional outbox: what the workflows must apply to the nodes. Written
-- in the same transaction as the change, so no change is lost if the
-- dispatcher or Temporal is down.
CREATE TABLE cron_job_tasks (
    id            bigserial PRIMARY KEY,
    cron_job_id   uuid NOT NULL,
    action        text NOT NULL CHECK (action IN ('create', 'update', 'delete', 'enable', 'disable', 'auto_disable', 'retry', 'run_now')),
    version       bigint NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    dispatched_at timestamptz
);
CREATE INDEX cron_job_tasks_pending ON cron_job_tasks (id) WHERE dispatched_at IS NULL;
