#!/bin/bash
# sweep.sh — one lost-run sweep pass over N active jobs, before and after:
# BenchmarkSweep (internal/store/sweep_bench_test.go) on this tree and the
# same benchmark file on BASE (a git revision: its store code, this
# benchmark), size by size, BASE first, on one throwaway PostgreSQL
# (fsync on). Prints a table with the load average.
#   JOBS=1000,10000,100000 BASE=main PASSES=1 scripts/bench/sweep.sh
# PASSES: timed passes per case (ns/op is their mean). CASES: the cases
# to run, comma-separated (default all: nothing_due,steady,due_reported,
# due_lost), e.g. CASES=due_reported for the backlog alone.
set -euo pipefail
cd "$(dirname "$0")/../.."
base=${BASE:-main}
work=$(mktemp -d /tmp/sweep-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
# BASE's tree with this benchmark (and the scale benchmark, which shares
# its helpers) in place of its own.
mkdir "$work/base"
git archive "$base" | tar -x -C "$work/base"
cp internal/store/sweep_bench_test.go internal/store/scale_bench_test.go "$work/base/internal/store/"
here=$PWD
cases=.
[ -n "${CASES:-}" ] && cases="^(${CASES//,/|})\$"
cat >"$work/run.sh" <<EOF
#!/bin/bash
set -euo pipefail
IFS=, read -ra sizes <<<"${JOBS:-1000,10000,100000}"
for n in "\${sizes[@]}"; do
  for tree in base head; do
    dir=$work/base; [ \$tree = head ] && dir=$here
    echo "load \$(cut -d' ' -f1-3 /proc/loadavg)" >>"$work/\$tree.out"
    (cd "\$dir" && HOSTCRON_BENCH_SWEEP_JOBS=\$n go test -count=1 -run '^\$' -bench '^BenchmarkSweep\$/./$cases' \
      -benchtime "${PASSES:-1}x" -timeout 120m ./internal/store/) >>"$work/\$tree.out" 2>&1 \
      || { tail -40 "$work/\$tree.out"; exit 1; }
  done
done
EOF
chmod +x "$work/run.sh"
scripts/with-pg.sh "$work/run.sh"
pg=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 | grep -o '[0-9]*' | head -1)
echo "lost-run sweep, one pass (timeout 60 s, grace 2 min), before = $base ($(git rev-parse --short "$base")), after = $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes'),"
echo "$(nproc) cores, $(date -u +%F), Go $(go env GOVERSION), PostgreSQL $pg; load average (1/5/15 min) before each run: $(grep -h '^load' "$work/base.out" "$work/head.out" | cut -d' ' -f2 | tr '\n' ' ')"
echo
awk '
  FNR == 1 { tree = (FILENAME ~ /base.out$/) ? "base" : "head" }
  /^BenchmarkSweep\// && $0 ~ /batched/ {
    split($1, p, "/"); n = substr(p[2], 6); c = p[3]
    ns[n "|" c "|" tree] = $3; lost[n "|" c "|" tree] = $5
    for (f = 4; f <= NF; f++) if ($f == "outcomes/s") rate[n "|" tree] = $(f - 1)
    if (!(n "|" c in seen)) { seen[n "|" c] = 1; order[++k] = n "|" c }
  }
  function fmt(v) { return v >= 1e9 ? sprintf("%.2f s", v / 1e9) : sprintf("%.1f ms", v / 1e6) }
  END {
    print "| jobs | case | lost runs (before / after) | before | after | after, per job | ratio |"
    print "|---|---|---|---|---|---|---|"
    for (i = 1; i <= k; i++) {
      split(order[i], q, "|"); key = order[i]
      old = ns[key "|base"]; new = ns[key "|head"]
      printf "| %s | %s | %s / %s | %s | %s | %.2f µs | %s |\n", q[1], q[2], lost[key "|base"], lost[key "|head"],
        (old ? fmt(old) : "not run"), (new ? fmt(new) : "not run"), new / q[1] / 1e3, (old && new ? sprintf("%.1fx", old / new) : "")
    }
    print ""
    print "steady case, the outcomes before each pass (RecordOutcomes, 256 a batch, 4 at a time; untimed in the pass):"
    print "| jobs | outcomes/s before | outcomes/s after |"
    print "|---|---|---|"
    for (i = 1; i <= k; i++) {
      split(order[i], q, "|")
      if (q[2] == "steady") printf "| %s | %.0f | %.0f |\n", q[1], rate[q[1] "|base"], rate[q[1] "|head"]
    }
  }' "$work/base.out" "$work/head.out"
