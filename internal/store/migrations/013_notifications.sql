-- Tenant notifications (issue 15): targets tenants register, the events
-- a run's recording emits (written in the run's own transaction: an
-- outbox), and one delivery per event and target, which the notification
-- worker claims, attempts and retries.

CREATE TABLE notification_targets (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id   uuid NOT NULL REFERENCES tenants(id),
    -- NULL: every job of the tenant
    cron_job_id uuid REFERENCES cron_jobs(id) ON DELETE CASCADE,
    kind        text NOT NULL CHECK (kind IN ('webhook', 'email')),
    url         text NOT NULL DEFAULT '',
    secret      text NOT NULL DEFAULT '',
    address     text NOT NULL DEFAULT '',
    events      text[] NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'webhook') = (url <> '')),
    CHECK ((kind = 'email') = (address <> ''))
);
CREATE INDEX notification_targets_tenant ON notification_targets (tenant_id, created_at, id);

-- No foreign key to the job: an event outlives the job it was about, as
-- the audit trail does.
CREATE TABLE notification_events (
    id          bigserial PRIMARY KEY,
    tenant_id   uuid NOT NULL,
    cron_job_id uuid NOT NULL,
    kind        text NOT NULL,
    run_id      bigint,
    run_key     text NOT NULL,
    payload     jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- one run key and kind never makes two events (a redelivered outcome,
    -- a sweep that retries)
    UNIQUE (cron_job_id, kind, run_key)
);

CREATE TABLE notification_deliveries (
    id              bigserial PRIMARY KEY,
    event_id        bigint NOT NULL REFERENCES notification_events(id) ON DELETE CASCADE,
    -- deleting a target deletes its deliveries: nothing pending is sent
    target_id       uuid NOT NULL REFERENCES notification_targets(id) ON DELETE CASCADE,
    tenant_id       uuid NOT NULL,
    channel         text NOT NULL CHECK (channel IN ('webhook', 'email')),
    state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'held', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    -- when it is due; while an attempt is in flight, the end of its lease
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text NOT NULL DEFAULT '',
    last_status     integer,
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id, target_id)
);
CREATE INDEX notification_deliveries_due ON notification_deliveries (state, next_attempt_at);
CREATE INDEX notification_deliveries_target ON notification_deliveries (target_id, id DESC);
CREATE INDEX notification_deliveries_updated ON notification_deliveries (updated_at) WHERE state IN ('delivered', 'failed');

-- A tenant's e-mail rate window: the e-mail worker locks it (FOR UPDATE)
-- while it plans the tenant's due e-mails, so replicas never both send.
CREATE TABLE notification_mail_windows (
    tenant_id uuid PRIMARY KEY,
    start     timestamptz NOT NULL,
    sent      integer NOT NULL DEFAULT 0
);
