-- A run's identity as columns, not free text (issue 16): the unique key of
-- the run history was (run_key, scheduled_at), a 60-90 byte text per
-- entry; it is now (cron_job_id, key_trigger, key_request, attempt,
-- scheduled_at): a UUID, the key's trigger, the request of a manual or
-- backfill run ('' for any other), the attempt (1 but for a retry) and
-- the slot. docs/benchmarks.md, "Run identity by columns", measures both
-- keys on the same history.
--
-- The key stays: nodes, the spool, notifications and the API speak it, and
-- it is what the identity columns are computed from (generated columns, a
-- row trigger and a check), so the two can never disagree. A lookup by a
-- key's value computes the columns in Go (store.runKeyWhere, as
-- runkey.Parse reads the key); a join on a key column, with the functions
-- below (store.runIdentity). Each probes the new index with the job,
-- trigger, request and attempt as its prefix and the slot, when the key
-- names one (one month); a manual key without a slot, as before.
--
-- The identity is exactly as strict as the old key. The columns are a
-- function of (run_key, scheduled_at) (the job's id is the key's first
-- part: both writers write the key of the job they write, and a check
-- holds them to it), so two rows that agree on the old key agree on the
-- new one. And the key is a function of the columns: the slot a key names
-- is its scheduled_at (the outcome endpoint and the sweeper hold every
-- key that names one to it), and for a key of no trigger this version
-- writes (the first version's {job}#{slot}#{version}, of which one slot
-- may hold several versions) the request is the whole key after the job,
-- so no two keys either version wrote become one.
--
-- The columns are stored: a later change of these rules must rewrite the
-- history (and be a migration of its own), or old rows keep the identity
-- the old rules gave them.
--
-- Deploying: adding the generated columns rewrites the history under
-- ACCESS EXCLUSIVE (about as long as 027's copy), and a core-api from
-- before this migration writes lost runs with ON CONFLICT (run_key,
-- scheduled_at), which no longer names a unique key, and looks runs up by
-- run_key, which no index serves any more: stop the old replicas (or
-- their sweepers) before migrating, as for 027. A sweep that failed
-- catches up on the next pass.

-- Not STRICT: a strict function whose body is not (a CASE) is never
-- inlined, and a join on a function call the planner cannot see into may
-- filter a job's runs instead of probing the index.
CREATE FUNCTION run_key_trigger(run_key text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN split_part(run_key, '#', 2);
COMMENT ON FUNCTION run_key_trigger(text) IS 'the trigger a run key names: scheduled (catch-up runs too), manual, backfill or retry';

CREATE FUNCTION run_key_request(run_key text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE split_part(run_key, '#', 2)
               WHEN 'manual' THEN split_part(run_key, '#', 3)
               WHEN 'backfill' THEN split_part(run_key, '#', 4)
               WHEN 'scheduled' THEN ''
               WHEN 'retry' THEN ''
               ELSE substr(run_key, strpos(run_key, '#') + 1) END;
COMMENT ON FUNCTION run_key_request(text) IS 'the request a manual or backfill run key names; empty for a scheduled or retry key; all after the job for a key of no known trigger';

CREATE FUNCTION run_key_attempt(run_key text) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN split_part(run_key, '#', 2) = 'retry' THEN split_part(run_key, '#', 4)::integer ELSE 1 END;
COMMENT ON FUNCTION run_key_attempt(text) IS 'the attempt a run key names: a retry''s last part, 1 for any other key';

LOCK TABLE cron_job_runs IN ACCESS EXCLUSIVE MODE;

-- The columns, the row trigger and the check spell the functions' rules
-- out rather than call them: a SQL function in a column's expression or a
-- check is inlined again for every INSERT statement (its catalog entry
-- read, its body planned), about 0.07 ms a statement, which an outcome
-- pays once per run (docs/benchmarks.md, "Run identity by columns").
-- The tests hold the two spellings to each other and to runkey.Parse.
-- COLLATE "C": identifiers, compared byte by byte (the index compares
-- them on every insert and probe; a linguistic collation calls strcoll).
ALTER TABLE cron_job_runs
    ADD COLUMN key_trigger text COLLATE "C" GENERATED ALWAYS AS (split_part(run_key, '#', 2)) STORED,
    ADD COLUMN key_request text COLLATE "C" GENERATED ALWAYS AS (
        CASE split_part(run_key, '#', 2)
            WHEN 'manual' THEN split_part(run_key, '#', 3)
            WHEN 'backfill' THEN split_part(run_key, '#', 4)
            WHEN 'scheduled' THEN ''
            WHEN 'retry' THEN ''
            ELSE substr(run_key, strpos(run_key, '#') + 1) END) STORED;

-- attempt was the retry key's last part and 1 by default; now it is the
-- key's attempt whatever a writer supplies, and checked to be (the rule of
-- run_key_attempt; a plpgsql body would also resolve the function by the
-- caller's search_path at run time, and record no dependency).
CREATE OR REPLACE FUNCTION cron_job_runs_trigger_from_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.trigger IS NULL THEN
        NEW.trigger := split_part(NEW.run_key, '#', 2);
    END IF;
    NEW.attempt := CASE WHEN split_part(NEW.run_key, '#', 2) = 'retry'
                        THEN split_part(NEW.run_key, '#', 4)::integer ELSE 1 END;
    RETURN NEW;
END $$;
-- The key's first part is the row's job (a key that names no job is
-- refused too: no lookup could find its row). A UUID's text is its
-- canonical lower-case form, as wire.ValidID holds a job id to.
ALTER TABLE cron_job_runs ADD CONSTRAINT cron_job_runs_identity_of_key
    CHECK (left(run_key, 37) = cron_job_id::text || '#'
           AND attempt = CASE WHEN split_part(run_key, '#', 2) = 'retry'
                              THEN split_part(run_key, '#', 4)::integer ELSE 1 END);

ALTER TABLE cron_job_runs DROP CONSTRAINT cron_job_runs_run_key_key;
ALTER TABLE cron_job_runs ADD CONSTRAINT cron_job_runs_identity
    UNIQUE (cron_job_id, key_trigger, key_request, attempt, scheduled_at);
COMMENT ON COLUMN cron_job_runs.run_key IS '{job}#{trigger}#{slot or request}[#…]: the run''s name; its identity is cron_job_runs_identity, computed from it';
