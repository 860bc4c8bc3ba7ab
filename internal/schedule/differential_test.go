package schedule

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// curated are expressions picked for edge cases; the generator adds more.
var curated = []string{
	"* * * * *", "*/5 * * * *", "0 * * * *", "0 2 * * *", "0 0 * * 0", "0 0 1 * *",
	"30 2 * * *", "30 1 * * *", "0 3 * * *", "*/15 * * * *", "0 */2 * * *", "15 2,3 * * *",
	"0 0 29 2 *", "0 0 31 * *", "0 12 13 * 5", "0 0 1,15 * 1", "0 0 */2 * 1", "0 0 1-7 * 1",
	"0 0 * * 7", "0 0 * * 1-7", "0 9 * * mon-fri", "0 22 * * 1-5/2", "5/15 * * * *",
	"0-30/10 8-18 * * *", "0 0 * */3 *", "0 0 * JAN,jul *", "@yearly", "@monthly", "@weekly",
	"@daily", "@hourly", "59 23 31 12 *", "0 0 30 * *", "*/7 */5 */3 */2 *", "0 0 * * 0,6",
	"1 1 1 1 1", "45 1-3 * * sun", "0 2 25-31 3 0", "0 2 25-31 10 sun", "30 2 * 3,10 *",
}

// genExpr builds a random valid-looking expression from the grammar.
func genExpr(r *rand.Rand) string {
	item := func(f field) string {
		span := f.max - f.min + 1
		a := f.min + r.Intn(span)
		b := a + r.Intn(f.max-a+1)
		switch r.Intn(9) {
		case 0, 1:
			return "*"
		case 2:
			return fmt.Sprintf("*/%d", 1+r.Intn(f.max/2+1))
		case 3:
			return fmt.Sprintf("%d-%d", a, b)
		case 4:
			return fmt.Sprintf("%d-%d/%d", a, b, 1+r.Intn(f.max/3+1))
		case 5:
			return fmt.Sprintf("%d/%d", a, 1+r.Intn(f.max/3+1))
		case 6:
			if f.names != nil {
				for n, v := range f.names {
					if v == a%7 || (f.name == "month" && v == a) {
						return strings.ToUpper(n[:1]) + n[1:]
					}
				}
			}
			return fmt.Sprint(a)
		default:
			return fmt.Sprint(a)
		}
	}
	var parts []string
	for _, f := range fields {
		n := 1
		if r.Intn(4) == 0 {
			n = 2 + r.Intn(2)
		}
		var items []string
		for i := 0; i < n; i++ {
			items = append(items, item(f))
		}
		parts = append(parts, strings.Join(items, ","))
	}
	return strings.Join(parts, " ")
}

var elapseLine = regexp.MustCompile(`(?m)^\s*(?:Next elapse|Iter\. #\d+): (?:\w{3} (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC|never)`)

// systemdNext asks systemd-analyze for the next n elapses of every value in
// one call per batch and returns them per value.
func systemdNext(t *testing.T, values []string, base time.Time, n int) [][]time.Time {
	t.Helper()
	args := []string{"calendar", fmt.Sprintf("--iterations=%d", n), fmt.Sprintf("--base-time=@%d", base.Unix())}
	cmd := exec.Command("systemd-analyze", append(args, values...)...)
	cmd.Env = append(os.Environ(), "TZ=UTC", "SYSTEMD_COLORS=0", "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze rejected our output: %v\n%s", err, out)
	}
	blocks := strings.Split(string(out), "Normalized form:")[1:]
	if len(blocks) != len(values) {
		t.Fatalf("systemd-analyze printed %d blocks for %d values", len(blocks), len(values))
	}
	res := make([][]time.Time, len(values))
	for i, b := range blocks {
		for _, m := range elapseLine.FindAllStringSubmatch(b, -1) {
			if m[1] == "" {
				break // never
			}
			at, err := time.Parse("2006-01-02 15:04:05", m[1])
			if err != nil {
				t.Fatal(err)
			}
			res[i] = append(res[i], at)
		}
	}
	return res
}

// unionFirst merges per-value fire times and keeps the first n distinct.
func unionFirst(lists [][]time.Time, n int) []time.Time {
	seen := map[time.Time]bool{}
	var all []time.Time
	for _, l := range lists {
		for _, at := range l {
			if !seen[at] {
				seen[at] = true
				all = append(all, at)
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Before(all[j]) })
	if len(all) > n {
		all = all[:n]
	}
	return all
}

func expressions(t *testing.T, count int) []string {
	r := rand.New(rand.NewSource(20261121))
	exprs := append([]string(nil), curated...)
	for len(exprs) < count {
		e := genExpr(r)
		if _, err := Parse(e, ""); err == nil {
			exprs = append(exprs, e)
		}
	}
	return exprs
}

// TestDifferentialSystemd checks, for hundreds of expressions, zones and base
// times (DST transitions among them), that systemd's own calendar engine
// fires our OnCalendar output exactly when our Next says it will.
func TestDifferentialSystemd(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-analyze is required in CI (package systemd)")
		}
		t.Skip("systemd-analyze not installed")
	}
	const iterations = 6
	exprs := expressions(t, 320)
	bases := []time.Time{
		utc("2026-03-29 00:30"), // Berlin spring forward at 01:00 UTC
		utc("2026-10-25 00:10"), // Berlin fall back at 01:00 UTC
		utc("2026-10-25 01:10"), // inside Berlin's repeated hour
		utc("2026-03-08 06:30"), // New York spring forward at 07:00 UTC
		utc("2026-11-21 12:34").Add(56 * time.Second),
		utc("2027-12-31 23:59").Add(30 * time.Second),
	}
	var compared, mismatches atomic.Int64
	for _, tz := range []string{"UTC", "Europe/Berlin", "America/New_York"} {
		t.Run(tz, func(t *testing.T) {
			t.Parallel() // systemd-analyze forks per zoned value; use both cores
			compareZone(t, tz, exprs, bases, iterations, &compared, &mismatches)
		})
	}
	t.Cleanup(func() {
		t.Logf("compared %d expressions x zones x base times against systemd-analyze: %d mismatches",
			compared.Load(), mismatches.Load())
	})
}

func compareZone(t *testing.T, tz string, exprs []string, bases []time.Time, iterations int, compared, mismatches *atomic.Int64) {
	{
		var values []string
		var owner []int // values[i] belongs to exprs[owner[i]]
		scheds := make([]*Schedule, len(exprs))
		for i, e := range exprs {
			scheds[i] = mustParse(t, e, tz)
			for _, v := range scheds[i].OnCalendar() {
				values = append(values, v)
				owner = append(owner, i)
			}
		}
		for _, base := range bases {
			got := systemdNext(t, values, base, iterations)
			perExpr := make([][][]time.Time, len(exprs))
			for i, l := range got {
				perExpr[owner[i]] = append(perExpr[owner[i]], l)
			}
			for i, s := range scheds {
				want := unionFirst(perExpr[i], iterations)
				ours := s.NextN(base, iterations)
				compared.Add(1)
				if !sameTimes(want, ours) {
					if mismatches.Add(1) <= 20 {
						t.Errorf("%q in %s from %s: systemd %v, ours %v (OnCalendar %q)",
							exprs[i], tz, base.Format(time.RFC3339), fmtTimes(want), fmtTimes(ours), s.OnCalendar())
					}
				}
			}
		}
	}
}

// TestNextMatchesCronDefinition checks Next against the plain definition of
// cron, minute by minute, in UTC where there is no DST to interpret.
func TestNextMatchesCronDefinition(t *testing.T) {
	base := utc("2026-11-21 12:34")
	horizon := base.Add(45 * 24 * time.Hour)
	for _, e := range expressions(t, 320) {
		s := mustParse(t, e, "UTC")
		var want []time.Time
		for m := base.Add(time.Minute); m.Before(horizon) && len(want) < 8; m = m.Add(time.Minute) {
			if s.Matches(m) {
				want = append(want, m)
			}
		}
		var got []time.Time
		for _, at := range s.NextN(base, 8) {
			if at.Before(horizon) {
				got = append(got, at.UTC())
			}
		}
		if !sameTimes(want, got) {
			t.Errorf("%q: definition %v, Next %v", e, fmtTimes(want), fmtTimes(got))
		}
	}
}

func sameTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

func fmtTimes(ts []time.Time) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.UTC().Format("2006-01-02T15:04Z")
	}
	return out
}
