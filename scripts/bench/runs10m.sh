#!/bin/bash
# runs10m.sh — the run history's hot queries at 10 million runs, on a
# throwaway PostgreSQL (scripts/with-pg.sh, fsync on, default memory
# settings): seeds the schema of internal/store/migrations with
# generate_series, prints EXPLAIN (ANALYZE, BUFFERS) of each hot query and
# a table of its mean latency over random jobs (pgbench), then (PROTO=1)
# copies the history into a table partitioned by month of scheduled_at,
# timing the copy (what a migration of an existing history costs), and
# measures the same queries on it, A/B in the same run.
#
#   JOBS=100000 RUNS=95 HOT=10 HOT_RUNS=50000 PROTO=1 scripts/bench/runs10m.sh
#
# JOBS ordinary jobs with RUNS runs each spread over 35 days (every 8.8 h),
# HOT every-minute jobs with HOT_RUNS runs each (the listing's worst case:
# a rare filter over a long history): 9.5 M + 0.5 M runs by default, about
# 6 GB with indexes (PROTO=1: twice that). TX: pgbench transactions per
# query. OUT: where the full EXPLAIN output goes.
#
# Written for the one-table history of migrations 001-026 and 027's
# prototype: the figures of docs/benchmarks.md, "Run history at 10
# million runs". It now seeds the current schema (already partitioned) and
# still reads runs by run_key, which since migration 029 no index serves:
# its queries are that section's, not the store's today.
# scripts/bench/runidentity.sh measures the current key.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/pglib.sh
JOBS=${JOBS:-100000} RUNS=${RUNS:-95} HOT=${HOT:-10} HOT_RUNS=${HOT_RUNS:-50000} PROTO=${PROTO:-1} TX=${TX:-300}
OUT=${OUT:-/tmp/runs10m-explain.txt}
: >"$OUT"
log() { echo "== $*" | tee -a "$OUT" >&2; }

log "schema: $(ls internal/store/migrations/*.sql | wc -l) migrations"
migrate

# Indexes and the unique/primary constraints are dropped for the load and
# built afterwards (a bulk load is what matters here, not its speed).
sql -At >/tmp/runs10m-indexes.sql <<'EOF'
SELECT 'ALTER TABLE cron_job_runs ADD CONSTRAINT ' || conname || ' ' || pg_get_constraintdef(oid) || ';'
FROM pg_constraint WHERE conrelid = 'cron_job_runs'::regclass AND contype IN ('p', 'u')
UNION ALL
SELECT indexdef || ';' FROM pg_indexes i WHERE tablename = 'cron_job_runs'
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname);
EOF
sql -At -c "SELECT string_agg(CASE WHEN EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)
  THEN 'ALTER TABLE cron_job_runs DROP CONSTRAINT ' || indexname ELSE 'DROP INDEX ' || indexname END, '; ')
  FROM pg_indexes i WHERE tablename = 'cron_job_runs'" | sql

log "seed: $JOBS jobs x $RUNS runs + $HOT jobs x $HOT_RUNS runs"
t0=$(now)
sql -v jobs="$JOBS" -v runs="$RUNS" -v hot="$HOT" -v hot_runs="$HOT_RUNS" <<'EOF'
SET synchronous_commit = off;
ALTER TABLE cron_job_runs DISABLE TRIGGER cron_job_runs_trigger_from_key;
INSERT INTO shards (id, name, web_storage_dir) VALUES ('00000000-0000-0000-0000-000000000001', 's1', '/srv');
INSERT INTO tenants (id, name, shard_id, linux_user, linux_group)
SELECT md5('t' || t)::uuid, 't' || t, '00000000-0000-0000-0000-000000000001', 'u' || t, 'u' || t FROM generate_series(1, 1000) t;
INSERT INTO webroots (id, tenant_id, path) SELECT md5('w' || t)::uuid, md5('t' || t)::uuid, '/srv/t' || t FROM generate_series(1, 1000) t;
INSERT INTO cron_jobs (id, tenant_id, webroot_id, schedule, command, status, created_at, swept_until)
SELECT md5(j::text)::uuid, md5('t' || (j % 1000 + 1))::uuid, md5('w' || (j % 1000 + 1))::uuid,
       CASE WHEN j > :jobs THEN '* * * * *' ELSE '17 */8 * * *' END, 'true', 'active', now() - interval '40 days', now()
FROM generate_series(1, :jobs + :hot) j;
-- One run (job j, i-th of the job) from two hashes: h picks the trigger
-- (2% manual, 2% retry, 1% backfill, 1% catch-up, 94% scheduled), r the
-- result (88% success, 6% exit_code, 1.5% timeout, 2% lost, 1% overlap,
-- the rest oom/signal/platform_error); a third of the runs carry an
-- output tail.
CREATE FUNCTION seed_run(j int, i int, slot timestamptz)
RETURNS TABLE (run_key text, cron_job_id uuid, version bigint, scheduled_at timestamptz, started_at timestamptz,
               finished_at timestamptz, duration_ms bigint, result text, exit_code int, failure_reason text,
               received_at timestamptz, trigger text, attempt int, cpu_seconds float8, peak_memory_bytes bigint,
               invocation_id text, output_tail text)
LANGUAGE sql IMMUTABLE AS $f$
  SELECT k.key, v.job, 1, slot, slot + interval '1 s', slot + make_interval(secs => 1 + v.r % 50),
     (1 + v.r % 50) * 1000,
     CASE WHEN v.r < 880 THEN 'success' WHEN v.r < 940 THEN 'exit_code' WHEN v.r < 955 THEN 'timeout' WHEN v.r < 975 THEN 'lost'
          WHEN v.r < 985 THEN 'overlap_skipped' WHEN v.r < 990 THEN 'oom' WHEN v.r < 995 THEN 'signal' ELSE 'platform_error' END,
     CASE WHEN v.r >= 880 AND v.r < 940 THEN 1 END, CASE WHEN v.r < 880 THEN '' ELSE 'exit status 1' END,
     slot + make_interval(secs => 30 + v.r % 60),
     CASE WHEN v.h < 20 THEN 'manual' WHEN v.h < 40 THEN 'retry' WHEN v.h < 50 THEN 'backfill' WHEN v.h < 60 THEN 'catchup' ELSE 'scheduled' END,
     CASE WHEN v.h >= 20 AND v.h < 40 THEN 2 ELSE 1 END,
     0.1, 10485760, md5(k.key), CASE WHEN v.r % 3 = 0 THEN repeat('output line ', 25) END
  FROM (SELECT ((i::bigint * 7919 + j::bigint * 104729) % 1000)::int AS h, ((i::bigint * 31 + j::bigint * 17) % 1000)::int AS r, md5(j::text)::uuid AS job) v,
  LATERAL (SELECT v.job::text || CASE
     WHEN v.h < 20 THEN '#manual#' || (i::bigint * 1000000 + j)
     WHEN v.h < 40 THEN '#retry#' || to_char(slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || '#2'
     WHEN v.h < 50 THEN '#backfill#' || to_char(slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || '#' || (i::bigint * 1000000 + j)
     ELSE '#scheduled#' || to_char(slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') END) k(key)
$f$;
EOF
# Time-major order (slot i of every job, then i+1), so ids follow time as
# they do in production; one statement per 5 slots keeps transactions short.
for ((i = 1; i <= RUNS; i += 5)); do
  sql -v jobs="$JOBS" -v lo="$i" -v hi="$((i + 4 < RUNS ? i + 4 : RUNS))" -v runs="$RUNS" <<'EOF'
SET synchronous_commit = off;
INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, started_at, finished_at, duration_ms, result, exit_code, failure_reason, received_at, trigger, attempt, cpu_seconds, peak_memory_bytes, invocation_id, output_tail)
SELECT s.* FROM generate_series(:lo, :hi) i, generate_series(1, :jobs) j,
  LATERAL seed_run(j, i, date_trunc('hour', now()) - interval '35 days'
           + (i - 1) * (interval '35 days' / :runs) + make_interval(mins => j % 480)) s;
EOF
done
for ((h = 1; h <= HOT; h++)); do
  sql -v j="$((JOBS + h))" -v n="$HOT_RUNS" <<'EOF'
SET synchronous_commit = off;
INSERT INTO cron_job_runs (run_key, cron_job_id, version, scheduled_at, started_at, finished_at, duration_ms, result, exit_code, failure_reason, received_at, trigger, attempt, cpu_seconds, peak_memory_bytes, invocation_id, output_tail)
SELECT s.* FROM generate_series(1, :n) i, LATERAL seed_run(:j, i, date_trunc('minute', now()) - (:n - i) * interval '1 minute') s;
EOF
done
t1=$(now)
log "seed: $(secs "$t0" "$t1") s"
sql -c "SET maintenance_work_mem = '512MB'" -f /tmp/runs10m-indexes.sql
sql -c "ALTER TABLE cron_job_runs ENABLE TRIGGER cron_job_runs_trigger_from_key"
sql -c "VACUUM (ANALYZE) cron_job_runs" -c "VACUUM (ANALYZE) cron_jobs"
t2=$(now)
log "indexes + vacuum: $(secs "$t1" "$t2") s"
sql -At -c "SELECT count(*) || ' runs, table ' || pg_size_pretty(pg_table_size('cron_job_runs')) || ', indexes ' || pg_size_pretty(pg_indexes_size('cron_job_runs')) FROM cron_job_runs" | tee -a "$OUT" >&2
sql -At -c "SELECT indexrelname || ' ' || pg_size_pretty(pg_relation_size(indexrelid)) FROM pg_stat_user_indexes WHERE relname = 'cron_job_runs' ORDER BY 1" | tee -a "$OUT" >&2

# The hot queries, as the store runs them (internal/store: pageRunsSQL,
# slotRuns, lockForOutcome + runWrite, sweep's lost-run insert, recountSQL,
# the reset's max(id), GetRun, runningWhere, DeleteRunsBefore), on table
# $1; $2 is its ON CONFLICT target. Literals for one ordinary and one
# every-minute job; a cursor two days back; a new run at the current
# minute.
explain_all() {
  local t=$1 conflict=$2
  sql -v t="$t" -v conflict="$conflict" -v job="$(jobid $((JOBS / 2 + 1)))" -v hot="$(jobid $((JOBS + 1)))" <<'SQL' 2>&1 | tee -a "$OUT" >/dev/null
\pset pager off
SELECT to_char(date_trunc('minute', now()) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS slot,
       date_trunc('minute', now()) AS slot_at, now() - interval '2 days' AS cursor_at,
       (SELECT id FROM :t WHERE cron_job_id = :'job' ORDER BY scheduled_at DESC, id DESC OFFSET 10 LIMIT 1) AS some_id \gset
\echo '--- page, newest first (ordinary job)'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT id, run_key, cron_job_id, version, node_id, scheduled_at, started_at, finished_at, duration_ms, result, exit_code, signal, failure_reason, received_at, trigger, attempt, cpu_seconds, peak_memory_bytes, warnings, invocation_id, output_truncated, output_dropped_bytes
  FROM :t WHERE cron_job_id = :'job' ORDER BY scheduled_at DESC, id DESC LIMIT 51;
\echo '--- page, newest first (every-minute job)'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT id, run_key, scheduled_at, result, trigger FROM :t WHERE cron_job_id = :'hot' ORDER BY scheduled_at DESC, id DESC LIMIT 51;
\echo '--- page, result=timeout (every-minute job)'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT id, run_key, scheduled_at, result, trigger FROM :t WHERE cron_job_id = :'hot' AND result = 'timeout' ORDER BY scheduled_at DESC, id DESC LIMIT 51;
\echo '--- page, result=timeout,oom (two values: a filter on the page index; every-minute job)'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT id, run_key, scheduled_at, result, trigger FROM :t WHERE cron_job_id = :'hot' AND result = ANY('{timeout,oom}'::text[]) ORDER BY scheduled_at DESC, id DESC LIMIT 51;
\echo '--- page, trigger=manual (every-minute job)'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT id, run_key, scheduled_at, result, trigger FROM :t WHERE cron_job_id = :'hot' AND trigger = 'manual' ORDER BY scheduled_at DESC, id DESC LIMIT 51;
\echo '--- next page by cursor (every-minute job)'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT id, run_key, scheduled_at, result, trigger FROM :t WHERE cron_job_id = :'hot' AND (scheduled_at, id) < (:'cursor_at'::timestamptz, 9223372036854775807::bigint) ORDER BY scheduled_at DESC, id DESC LIMIT 51;
\echo '--- slots view, 7 days (every-minute job)'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT id, run_key, scheduled_at, result, trigger FROM :t WHERE cron_job_id = :'hot' AND trigger = ANY('{scheduled,catchup,retry}'::text[]) AND scheduled_at >= now() - interval '7 days' AND scheduled_at < now() ORDER BY scheduled_at, id LIMIT 1001;
\echo '--- outcome: read the run key under the job lock'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT result FROM :t WHERE run_key = :'job' || '#scheduled#' || :'slot' AND cron_job_id = :'job';
\echo '--- outcome: insert the run (rolled back)'
BEGIN;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) INSERT INTO :t (run_key, cron_job_id, version, scheduled_at, started_at, finished_at, duration_ms, result, exit_code, failure_reason, trigger)
  VALUES (:'job' || '#scheduled#' || :'slot', :'job', 1, :'slot_at', now(), now(), 1000, 'success', 0, '', NULL) RETURNING id;
ROLLBACK;
\echo '--- outcome: replace a placeholder by key (rolled back)'
BEGIN;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) UPDATE :t SET result = 'success', received_at = now()
  WHERE run_key = (SELECT run_key FROM :t WHERE id = :some_id) AND cron_job_id = :'job' RETURNING id;
ROLLBACK;
\echo '--- sweep: lost runs of a batch of 2000 jobs, one statement (rolled back)'
BEGIN;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) INSERT INTO :t (run_key, cron_job_id, version, scheduled_at, result, failure_reason)
  SELECT md5(j::text) || '#scheduled#' || :'slot', md5(j::text)::uuid, 1, :'slot_at'::timestamptz, 'lost', 'no outcome reported'
  FROM generate_series(1, 2000) j
  ON CONFLICT :conflict DO NOTHING RETURNING cron_job_id::text, id;
ROLLBACK;
\echo '--- failure recount (every-minute job)'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT result FROM (
  SELECT result, scheduled_at, id FROM :t
  WHERE cron_job_id = :'hot' AND result = ANY('{exit_code,signal,timeout,oom,failed}'::text[]) AND trigger <> ALL('{backfill}'::text[]) AND NOT superseded
    AND id > (SELECT failures_after_run FROM cron_jobs WHERE id = :'hot')
  ORDER BY scheduled_at DESC, id DESC LIMIT 6) recent ORDER BY scheduled_at, id;
\echo '--- enable/retry: max(id) of the job (every-minute job)'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT coalesce(max(r.id), 0) FROM :t r WHERE r.cron_job_id = :'hot';
\echo '--- GET run by id'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT id, output_tail FROM :t WHERE cron_job_id = :'job' AND id = :some_id;
\echo '--- a start still running: the run key alone (starts.go runningWhere)'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT 1 FROM :t r WHERE r.run_key = :'job' || '#scheduled#' || :'slot' AND r.result NOT IN ('lost', 'overlap_skipped', 'platform_error', 'cancelled');
SQL
}
jobid() { sql -At -c "SELECT md5('$1')::uuid"; }

# Mean latency of each query over random jobs: pgbench, one client.
bench_all() {
  local t=$1 conflict=$2 label=$3 dir; dir=$(mktemp -d)
  local any="\\set j random(1, $JOBS)" hot="\\set j random($((JOBS + 1)), $((JOBS + HOT)))"
  local job="md5(:j::text)::uuid" cols="id, run_key, cron_job_id, version, node_id, scheduled_at, started_at, finished_at, duration_ms, result, exit_code, signal, failure_reason, received_at, trigger, attempt, cpu_seconds, peak_memory_bytes, warnings, invocation_id, output_truncated, output_dropped_bytes"
  local slot="to_char(date_trunc('minute', now()) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
  printf '%s\nSELECT %s FROM %s WHERE cron_job_id = %s ORDER BY scheduled_at DESC, id DESC LIMIT 51;\n' "$any" "$cols" "$t" "$job" >"$dir/01 page, ordinary job"
  printf '%s\nSELECT %s FROM %s WHERE cron_job_id = %s ORDER BY scheduled_at DESC, id DESC LIMIT 51;\n' "$hot" "$cols" "$t" "$job" >"$dir/02 page, every-minute job"
  printf '%s\nSELECT %s FROM %s WHERE cron_job_id = %s AND result = '"'timeout'"' ORDER BY scheduled_at DESC, id DESC LIMIT 51;\n' "$hot" "$cols" "$t" "$job" >"$dir/03 page result=timeout, every-minute"
  printf '%s\nSELECT %s FROM %s WHERE cron_job_id = %s AND trigger = '"'manual'"' ORDER BY scheduled_at DESC, id DESC LIMIT 51;\n' "$hot" "$cols" "$t" "$job" >"$dir/04 page trigger=manual, every-minute"
  printf '%s\n\\set d random(1, 30)\nSELECT %s FROM %s WHERE cron_job_id = %s AND (scheduled_at, id) < (now() - :d * interval '"'1 day'"', 9223372036854775807) ORDER BY scheduled_at DESC, id DESC LIMIT 51;\n' "$hot" "$cols" "$t" "$job" >"$dir/05 next page by cursor, every-minute"
  printf '%s\nSELECT %s FROM %s WHERE cron_job_id = %s AND trigger = ANY('"'{scheduled,catchup,retry}'"'::text[]) AND scheduled_at >= now() - interval '"'7 days'"' AND scheduled_at < now() ORDER BY scheduled_at, id LIMIT 1001;\n' "$hot" "$cols" "$t" "$job" >"$dir/06 slots view 7 days, every-minute"
  printf '%s\nSELECT result FROM %s WHERE run_key = %s::text || '"'#scheduled#'"' || %s AND cron_job_id = %s;\n' "$any" "$t" "$job" "$slot" "$job" >"$dir/07 outcome: read by run key"
  printf '%s\nBEGIN;\nINSERT INTO %s (run_key, cron_job_id, version, scheduled_at, result, failure_reason) VALUES (%s::text || '"'#scheduled#'"' || %s, %s, 1, date_trunc('"'minute'"', now()), '"'success'"', '"''"') RETURNING id;\nROLLBACK;\n' "$any" "$t" "$job" "$slot" "$job" >"$dir/08 outcome: insert (rolled back)"
  printf '\\set j random(1, %d)\nBEGIN;\nINSERT INTO %s (run_key, cron_job_id, version, scheduled_at, result, failure_reason) SELECT md5(k::text) || '"'#scheduled#'"' || %s, md5(k::text)::uuid, 1, date_trunc('"'minute'"', now()), '"'lost'"', '"''"' FROM generate_series(:j, :j + 1999) k ON CONFLICT %s DO NOTHING RETURNING id;\nROLLBACK;\n' "$((JOBS - 2000))" "$t" "$slot" "$conflict" >"$dir/09 sweep: 2000 lost runs (rolled back)"
  printf '%s\nSELECT result FROM (SELECT result, scheduled_at, id FROM %s WHERE cron_job_id = %s AND result = ANY('"'{exit_code,signal,timeout,oom,failed}'"'::text[]) AND trigger <> ALL('"'{backfill}'"'::text[]) AND NOT superseded AND id > (SELECT failures_after_run FROM cron_jobs WHERE id = %s) ORDER BY scheduled_at DESC, id DESC LIMIT 6) recent ORDER BY scheduled_at, id;\n' "$hot" "$t" "$job" "$job" >"$dir/10 failure recount, every-minute"
  printf '%s\nSELECT coalesce(max(id), 0) FROM %s WHERE cron_job_id = %s;\n' "$hot" "$t" "$job" >"$dir/11 max(id) of a job, every-minute"
  printf '\\set i random(1, %d)\nSELECT id, output_tail FROM %s WHERE id = :i;\n' "$((JOBS * RUNS))" "$t" >"$dir/12 GET run by id"
  for f in "$dir"/*; do
    local ms; ms=$("$bin/pgbench" "$db" -n -c 1 -t "$TX" -f "$f" 2>/dev/null | awk '/latency average/ { print $4 }')
    echo "$label|$(basename "$f")|$ms" >>/tmp/runs10m-latency.txt
  done
  rm -rf "$dir"
}

: >/tmp/runs10m-latency.txt
log "EXPLAIN, one table (cron_job_runs)"
explain_all cron_job_runs "(run_key)"
bench_all cron_job_runs "(run_key)" "one table"
log "retention, one table: one DELETE batch of 5000 runs older than 30 days (rolled back)"
sql <<'SQL' 2>&1 | tee -a "$OUT" >/dev/null
BEGIN;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) DELETE FROM cron_job_runs WHERE id IN (SELECT id FROM cron_job_runs WHERE received_at < now() - interval '30 days' LIMIT 5000);
ROLLBACK;
SQL

if [ "$PROTO" = 1 ]; then
  # The history partitioned by month of scheduled_at: a partition for each
  # month of the default retention (180 days) up to next month, and a
  # DEFAULT one. Unique keys must hold the partition key: (run_key,
  # scheduled_at), the primary key (id, scheduled_at). The id keeps the
  # one sequence.
  log "partitioned copy: monthly partitions, copy then indexes"
  sql <<'SQL'
CREATE TABLE runs_p (LIKE cron_job_runs INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (scheduled_at);
DO $$
DECLARE m date;
BEGIN
  FOR m IN SELECT generate_series(date_trunc('month', now() - interval '180 days'), date_trunc('month', now() + interval '1 month'), interval '1 month')::date LOOP
    EXECUTE format('CREATE TABLE %I PARTITION OF runs_p FOR VALUES FROM (%L) TO (%L)', 'runs_p_' || to_char(m, 'YYYY_MM'), m, m + interval '1 month');
  END LOOP;
END $$;
CREATE TABLE runs_p_default PARTITION OF runs_p DEFAULT;
CREATE TRIGGER runs_p_trigger_from_key BEFORE INSERT ON runs_p FOR EACH ROW EXECUTE FUNCTION cron_job_runs_trigger_from_key();
SQL
  t3=$(now)
  sql -c "SET synchronous_commit = off" -c "INSERT INTO runs_p SELECT * FROM cron_job_runs"
  sql -c "SELECT setval('cron_job_runs_id_seq', (SELECT max(id) FROM runs_p))" >/dev/null
  t4=$(now)
  sql <<'SQL'
SET maintenance_work_mem = '512MB';
ALTER TABLE runs_p ADD PRIMARY KEY (id, scheduled_at);
ALTER TABLE runs_p ADD UNIQUE (run_key, scheduled_at);
CREATE INDEX ON runs_p (cron_job_id, scheduled_at DESC, id DESC);
CREATE INDEX ON runs_p (cron_job_id, result, scheduled_at DESC, id DESC);
CREATE INDEX ON runs_p (cron_job_id, trigger, scheduled_at DESC, id DESC);
CREATE INDEX ON runs_p (retry_due_at) WHERE retry_due_at IS NOT NULL;
VACUUM (ANALYZE) runs_p;
SQL
  t5=$(now)
  rows=$(sql -At -c "SELECT count(*) FROM cron_job_runs")
  log "migration cost: copy $(secs "$t3" "$t4") s, indexes + analyze $(secs "$t4" "$t5") s for $rows runs: $(awk -v a="$t3" -v b="$t5" -v n="$rows" 'BEGIN { printf "%.1f", (b - a) / n * 1e6 }') s per million runs"
  sql -At -c "SELECT count(*) || ' partitions, ' || pg_size_pretty(sum(pg_table_size(inhrelid))) || ' tables, ' || pg_size_pretty(sum(pg_indexes_size(inhrelid))) || ' indexes' FROM pg_inherits WHERE inhparent = 'runs_p'::regclass" | tee -a "$OUT" >&2
  log "EXPLAIN, partitioned (runs_p)"
  explain_all runs_p "(run_key, scheduled_at)"
  bench_all runs_p "(run_key, scheduled_at)" "partitioned"
  # DETACH … CONCURRENTLY is refused while a DEFAULT partition exists: a
  # plain DETACH takes ACCESS EXCLUSIVE on the parent for a moment, so it
  # waits at most lock_timeout (not queueing every outcome behind it).
  log "retention, partitioned: detach and drop the oldest month with runs"
  old=$(sql -At -c "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'runs_p'::regclass AND c.relname <> 'runs_p_default' AND EXISTS (SELECT 1 FROM runs_p WHERE tableoid = c.oid) ORDER BY 1 LIMIT 1")
  n=$(sql -At -c "SELECT count(*) FROM $old")
  t6=$(now)
  sql -c "SET lock_timeout = '2s'" -c "ALTER TABLE runs_p DETACH PARTITION $old" -c "DROP TABLE $old"
  t7=$(now)
  log "retention, partitioned: $old ($n runs) detached and dropped in $(secs "$t6" "$t7") s"
fi

echo
echo "run history hot queries, $((JOBS * RUNS + HOT * HOT_RUNS)) runs, $(nproc) cores, $(date -u +%F), PostgreSQL $(basename "$(dirname "$bin")"), load $(cut -d' ' -f1-3 /proc/loadavg); mean latency over $TX transactions, random jobs"
echo
awk -F'|' '
  { q[$2] = 1; ms[$1 "|" $2] = $3; if (!($1 in seen)) { seen[$1] = 1; labels[++n] = $1 } }
  END {
    h = "| query |"; s = "|---|"
    for (i = 1; i <= n; i++) { h = h " " labels[i] " (ms) |"; s = s "---|" }
    print h; print s
    k = 0; for (x in q) names[++k] = x
    for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (names[j] < names[i]) { t = names[i]; names[i] = names[j]; names[j] = t }
    for (i = 1; i <= k; i++) { line = "| " substr(names[i], 4) " |"; for (l = 1; l <= n; l++) line = line " " ms[labels[l] "|" names[i]] " |"; print line }
  }' /tmp/runs10m-latency.txt
echo
echo "EXPLAIN output: $OUT"
