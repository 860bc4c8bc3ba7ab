-- The end of a run's output (issue 14): the last 4 KiB the command wrote
-- (stdout and stderr in order, UTF-8), kept with the run so GET run shows
-- why it failed without Loki; NULL when none was captured (no command ran,
-- a node from before the tail, a runner that was killed). Whether the
-- journal's copy of the output was cut (the runner's bounds, or a pipe a
-- background process held open), and how many bytes it dropped.
ALTER TABLE cron_job_runs
    ADD COLUMN output_tail          text,
    ADD COLUMN output_truncated     boolean NOT NULL DEFAULT false,
    ADD COLUMN output_dropped_bytes bigint  NOT NULL DEFAULT 0;
