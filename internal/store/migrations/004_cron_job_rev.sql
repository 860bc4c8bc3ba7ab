-- Each version of a job records the transaction that wrote it (rev), so a
-- node can tell whether a converge's snapshot (pg_current_snapshot(), read
-- with the desired set) saw that write: a unit the set lacks is an orphan
-- only if the snapshot saw the write the unit came from. See
-- docs/semantics.md, "Orphans, snapshots and tombstones".
-- Existing rows get this migration's transaction.
ALTER TABLE cron_jobs ADD COLUMN rev xid8 NOT NULL DEFAULT pg_current_xact_id();

-- A trigger, not each statement, sets it: every write that makes a new
-- version (create, update, delete-mark, enable, disable, auto-disable,
-- re-queue) gets the writing transaction, including ones added later.
CREATE FUNCTION cron_jobs_set_rev() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.version IS DISTINCT FROM OLD.version THEN
        NEW.rev := pg_current_xact_id();
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER cron_jobs_rev BEFORE INSERT OR UPDATE ON cron_jobs
    FOR EACH ROW EXECUTE FUNCTION cron_jobs_set_rev();
