-- A job's environment (issue 14): name=value pairs for its command, which
-- the API validates (jobspec.ValidateEnvironment). Values may be secrets:
-- they leave the core only to the owning tenant and, in the job's
-- root-only spec file, to the shard's nodes; never into a unit file.
ALTER TABLE cron_jobs ADD COLUMN environment jsonb NOT NULL DEFAULT '{}';

