#!/bin/bash
# runidentity.sh — the run history's unique key as columns (migration 029)
# against the free-text key it replaced, on the same history, on a
# throwaway PostgreSQL (scripts/with-pg.sh, fsync on, default settings):
# seeds JOBS x RUNS runs with every kind of key into the current schema
# with the old unique index (run_key, scheduled_at) beside the new one,
# prints both sizes as grown and rebuilt, the plans of the lookups by key
# (EXPLAIN ANALYZE, BUFFERS) and the time migration 029 takes on that
# history.
#
#   JOBS=20000 RUNS=50 HOT=20 HOT_RUNS=50000 scripts/bench/runidentity.sh
#
# Runs: one every 16.8 h over 35 days per job (several months), and HOT
# every-minute jobs with HOT_RUNS runs each (the history a lookup that
# does not bound itself by the slot would read); keys 94 % scheduled (1 %
# of them run as catch-up), 2 % manual, 2 % retry, 1 % backfill, as
# scripts/bench/runs10m.sh seeds them. 100 runs in progress, those of the
# HOT jobs among them. OUT: where the EXPLAIN output goes.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/pglib.sh
JOBS=${JOBS:-20000} RUNS=${RUNS:-50} HOT=${HOT:-20} HOT_RUNS=${HOT_RUNS:-50000}
OUT=${OUT:-/tmp/runidentity-explain.txt}
: >"$OUT"

migrate
# The old key beside the new, both growing with the inserts as in
# production; rebuilt afterwards (REINDEX), as a migration leaves them.
sql -c "CREATE UNIQUE INDEX runs_old_key ON cron_job_runs (run_key, scheduled_at)"
echo "seeding $JOBS jobs x $RUNS runs ($(cut -d' ' -f1-3 /proc/loadavg))" >&2
t0=$(now)
sql -v jobs="$JOBS" -v runs="$RUNS" -v hot="$HOT" -v hot_runs="$HOT_RUNS" <<'EOF'
SET synchronous_commit = off;
INSERT INTO shards (id, name, web_storage_dir) VALUES ('00000000-0000-0000-0000-000000000001', 's1', '/srv');
INSERT INTO tenants (id, name, shard_id, linux_user, linux_group)
VALUES ('00000000-0000-0000-0000-000000000002', 't', '00000000-0000-0000-0000-000000000001', 'u', 'u');
INSERT INTO nodes (id, shard_id, name, credential_hash) VALUES ('00000000-0000-0000-0000-000000000004', '00000000-0000-0000-0000-000000000001', 'n1', '\x00');
INSERT INTO webroots (id, tenant_id, path) VALUES ('00000000-0000-0000-0000-000000000003', '00000000-0000-0000-0000-000000000002', '/srv/t');
INSERT INTO cron_jobs (id, tenant_id, webroot_id, schedule, command, status, created_at, swept_until)
SELECT md5(j::text)::uuid, '00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-000000000003',
       '17 */8 * * *', 'true', 'active', now() - interval '40 days', now()
FROM generate_series(1, :jobs + :hot) j;
INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, result, trigger)
SELECT k.key, v.job, 1, v.slot, 'success', CASE WHEN v.h >= 50 AND v.h < 60 THEN 'catchup' END
FROM (SELECT i, j, date_trunc('hour', now()) - interval '35 days' + (i - 1) * (interval '35 days' / :runs)
             + make_interval(mins => j % 480) AS slot
      FROM generate_series(1, :runs) i, generate_series(1, :jobs) j
      UNION ALL
      SELECT i, j, date_trunc('hour', now()) - (:hot_runs - i + 1) * interval '1 minute'
      FROM generate_series(1, :hot_runs) i, generate_series(:jobs + 1, :jobs + :hot) j) g,
  LATERAL (SELECT g.i, g.j, g.slot, ((g.i::bigint * 7919 + g.j::bigint * 104729) % 1000)::int AS h, md5(g.j::text)::uuid AS job) v,
  LATERAL (SELECT to_char(v.slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS s) f,
  LATERAL (SELECT v.job::text || CASE
     WHEN v.h < 20 THEN '#manual#' || (v.i::bigint * 1000000 + v.j)
     WHEN v.h < 40 THEN '#retry#' || f.s || '#2'
     WHEN v.h < 50 THEN '#backfill#' || f.s || '#' || (v.i::bigint * 1000000 + v.j)
     ELSE '#scheduled#' || f.s END AS key) k;
INSERT INTO cron_job_run_starts (cron_job_id, node_id, run_key, scheduled_at, started_at, invocation_id, trigger)
SELECT id, '00000000-0000-0000-0000-000000000004', id::text || '#scheduled#' || to_char(date_trunc('hour', now()) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       date_trunc('hour', now()), now(), '', 'scheduled'
FROM cron_jobs ORDER BY created_at, id LIMIT 100 - :hot;
INSERT INTO cron_job_run_starts (cron_job_id, node_id, run_key, scheduled_at, started_at, invocation_id, trigger)
SELECT md5(j::text)::uuid, '00000000-0000-0000-0000-000000000004',
       md5(j::text)::uuid::text || '#scheduled#' || to_char(date_trunc('hour', now()) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
       date_trunc('hour', now()), now(), '', 'scheduled'
FROM generate_series(:jobs + 1, :jobs + :hot) j
ON CONFLICT DO NOTHING;
EOF
t1=$(now)
sql -c "VACUUM (ANALYZE) cron_job_runs" -c "ANALYZE cron_jobs" -c "ANALYZE cron_job_run_starts"
echo "seeded in $(secs "$t0" "$t1") s" >&2

size() { # the parent index's size: the sum of its partitions'
  sql -At -c "SELECT count(*) FROM cron_job_runs" -c "SELECT pg_size_pretty(sum(pg_relation_size(relid))) || ' (' ||
    round(sum(pg_relation_size(relid))::numeric / (SELECT count(*) FROM cron_job_runs), 1) || ' bytes a run)'
    FROM pg_partition_tree('$1') WHERE isleaf" | tail -1
}
runs=$(sql -At -c "SELECT count(*) FROM cron_job_runs")
old_grown=$(size runs_old_key)
new_grown=$(size cron_job_runs_identity)
build() { # INDEX: rebuild it, print the seconds it took
  local t; t=$(now)
  sql -c "SET maintenance_work_mem = '256MB'" -c "REINDEX INDEX $1" >/dev/null
  secs "$t" "$(now)"
}
old_build=$(build runs_old_key)
new_build=$(build cron_job_runs_identity)
old=$(size runs_old_key)
new=$(size cron_job_runs_identity)
table=$(sql -At -c "SELECT pg_size_pretty(sum(pg_table_size(relid))) FROM pg_partition_tree('cron_job_runs') WHERE isleaf")

job=$(sql -At -c "SELECT md5(($JOBS / 2)::text)::uuid")
key=$(sql -At -c "SELECT run_key FROM cron_job_runs WHERE cron_job_id = '$job' AND key_trigger = 'scheduled' ORDER BY scheduled_at DESC LIMIT 1")
slot=$(sql -At -c "SELECT scheduled_at FROM cron_job_runs WHERE run_key = '$key'")
manual=$(sql -At -c "SELECT run_key FROM cron_job_runs WHERE key_trigger = 'manual' ORDER BY scheduled_at DESC LIMIT 1")
# exec_ms LABEL SQL: one EXPLAIN ANALYZE (after a warm-up run), its plan
# to OUT, its execution time out.
exec_ms() {
  sql -At -c "$2" >/dev/null
  { echo "--- $1"; sql -At -c "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) $2"; } >>"$OUT"
  tail -1 "$OUT" | grep -o '[0-9.]* ms' | head -1
}
identity="cron_job_id = left(k, 36)::uuid AND key_trigger = run_key_trigger(k) AND key_request = run_key_request(k) AND attempt = run_key_attempt(k)"
scheduled_new=$(exec_ms "scheduled key, identity" "SELECT result FROM cron_job_runs, (SELECT '$key'::text AS k) p WHERE $identity AND scheduled_at = '$slot'")
scheduled_old=$(exec_ms "scheduled key, old key" "SELECT result FROM cron_job_runs WHERE run_key = '$key' AND scheduled_at = '$slot'")
manual_new=$(exec_ms "manual key, identity" "SELECT result FROM cron_job_runs, (SELECT '$manual'::text AS k) p WHERE $identity")
manual_old=$(exec_ms "manual key, old key" "SELECT result FROM cron_job_runs WHERE run_key = '$manual'")
# As runningWhere asks: at the start's slot, and for a manual key in any
# month too.
s_identity="r.cron_job_id = s.cron_job_id AND r.key_trigger = run_key_trigger(s.run_key)
     AND r.key_request = run_key_request(s.run_key) AND r.attempt = run_key_attempt(s.run_key)"
running_new=$(exec_ms "runs still running, 100 starts, identity" "SELECT count(*) FROM cron_job_run_starts s
  WHERE NOT EXISTS (SELECT 1 FROM cron_job_runs r WHERE $s_identity AND r.scheduled_at = s.scheduled_at AND r.result <> 'lost')
    AND (run_key_trigger(s.run_key) <> 'manual' OR NOT EXISTS (SELECT 1 FROM cron_job_runs r WHERE r.cron_job_id = s.cron_job_id
      AND r.key_trigger = 'manual' AND r.key_request = run_key_request(s.run_key) AND r.attempt = 1 AND r.result <> 'lost'))")
running_old=$(exec_ms "runs still running, 100 starts, old key" "SELECT count(*) FROM cron_job_run_starts s WHERE NOT EXISTS
  (SELECT 1 FROM cron_job_runs r WHERE r.run_key = s.run_key AND r.result <> 'lost')")

# Migration 029 on this history: back to the shape before it, then 029.
sql -c "DROP INDEX runs_old_key" >/dev/null
sql <<'EOF'
ALTER TABLE cron_job_runs DROP CONSTRAINT cron_job_runs_identity, DROP CONSTRAINT cron_job_runs_identity_of_key,
  DROP COLUMN key_trigger, DROP COLUMN key_request;
DROP FUNCTION run_key_trigger(text), run_key_request(text), run_key_attempt(text);
ALTER TABLE cron_job_runs ADD CONSTRAINT cron_job_runs_run_key_key UNIQUE (run_key, scheduled_at);
VACUUM cron_job_runs;
EOF
t3=$(now)
sql -1 -f internal/store/migrations/029_run_identity_columns.sql >/dev/null
t4=$(now)

cat <<EOF

## run identity: columns against the text key ($(date -u +%F), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))
$runs runs ($JOBS jobs x $RUNS, $HOT x $HOT_RUNS every minute), table $table

| measure | text key (run_key, scheduled_at) | identity (job, trigger, request, attempt, slot) |
|---|---|---|
| unique index, grown by the inserts | $old_grown | $new_grown |
| unique index, rebuilt | $old | $new |
| rebuild (REINDEX) | $old_build s | $new_build s |
| read a scheduled key (one month) | $scheduled_old | $scheduled_new |
| read a manual key (every month) | $manual_old | $manual_new |
| 100 starts still running? (runningWhere) | $running_old | $running_new |

migration 029 on this history: $(secs "$t3" "$t4") s (plans: $OUT)
EOF
