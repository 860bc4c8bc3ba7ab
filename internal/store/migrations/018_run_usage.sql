-- What one run used, and its output's handle (issue 14): the command's CPU
-- seconds and peak memory (the runner's rusage of it), warnings when it
-- came near its limits, and the systemd invocation id its output carries
-- in the journal and in Loki, which the logs API's run= filter selects.
ALTER TABLE cron_job_runs
    ADD COLUMN cpu_seconds       double precision,
    ADD COLUMN peak_memory_bytes bigint,
    ADD COLUMN warnings          text[] NOT NULL DEFAULT '{}',
    ADD COLUMN invocation_id     text NOT NULL DEFAULT '';
