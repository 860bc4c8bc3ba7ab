-- Overlap policy (issue 14): what a slot does when it finds the job's
-- previous run still running. skip (every job's behaviour until now, and
-- the default) records it overlap_skipped; buffer_one waits for the run to
-- end and then runs the newest such slot; cancel_previous stops the run
-- (recorded cancelled) and runs the new slot. The runner enforces it
-- through the job's lock and slot stamp (docs/semantics.md, "Overlap
-- policies").
-- A constant default: PostgreSQL 11+ adds the column without rewriting
-- the table, and the CHECK on a column whose every row holds the default
-- needs no lock-holding rewrite either (a quick scan of cron_jobs).
ALTER TABLE cron_jobs
    ADD COLUMN overlap_policy text NOT NULL DEFAULT 'skip'
        CONSTRAINT cron_jobs_overlap_policy CHECK (overlap_policy IN ('skip', 'buffer_one', 'cancel_previous'));
