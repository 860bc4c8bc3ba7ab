-- Per-tenant quotas an admin sets; a NULL column keeps the config's
-- default, and a tenant without a row has every default.
CREATE TABLE tenant_quotas (
    tenant_id            uuid PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    max_jobs             integer CHECK (max_jobs >= 0),
    min_interval_seconds integer CHECK (min_interval_seconds >= 0),
    max_timeout_seconds  integer CHECK (max_timeout_seconds >= 0),
    max_memory_mb        integer CHECK (max_memory_mb >= 0),
    updated_at           timestamptz NOT NULL DEFAULT now()
);
