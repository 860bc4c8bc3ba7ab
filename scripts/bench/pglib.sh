# pglib.sh — sourced by the benchmarks that talk to a throwaway PostgreSQL
# themselves (runs10m.sh, runidentity.sh), from the repository's root:
# re-runs the caller under scripts/with-pg.sh unless it already is, and
# gives it psql (sql), the migrations (migrate) and a clock (now, secs).
if [ -z "${HOSTCRON_TEST_DATABASE_URL:-}" ]; then
  exec scripts/with-pg.sh "$0" "$@"
fi
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
db=$HOSTCRON_TEST_DATABASE_URL
sql() { "$bin/psql" "$db" -X -q -v ON_ERROR_STOP=1 "$@"; }
# migrate applies every migration, each in one transaction as tern does
# (027 and 029 lock the run history, which only a transaction may).
migrate() { for m in internal/store/migrations/*.sql; do sql -1 -f "$m" >/dev/null; done; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
