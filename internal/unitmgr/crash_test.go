package unitmgr

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/atomicfile"
	"github.com/hostcron/hostcron/internal/units"
	"github.com/hostcron/hostcron/internal/wire"
)

// managerAt is a Manager on dir (unit dir dir/system, specs in dir/jobs)
// with a fresh fake systemd whose enable links go to dir's wants dir.
func managerAt(t *testing.T, dir string) (*Manager, *fakeSystemd) {
	t.Helper()
	f := newFake()
	paths := units.DefaultPaths
	paths.SpecDir = filepath.Join(dir, "jobs")
	m := New(f, filepath.Join(dir, "system"), paths, slog.New(slog.NewTextHandler(io.Discard, nil)))
	m.lockDir = func(string, string, string) error { return nil }
	m.lockDirOK = func(string, string, string) bool { return true }
	f.wantsDir = filepath.Join(dir, "system", "timers.target.wants")
	m.now = func() time.Time { return testNow }
	if err := os.MkdirAll(f.wantsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return m, f
}

// crashScenario is a converge from before to after that a crash
// interrupts.
type crashScenario struct {
	name          string
	before, after []wire.Job
	// held: systemd holds the units whose files change, so the converge
	// reloads and must leave the dirty marker until it has.
	held bool
}

var crashScenarios = []crashScenario{
	// A's schedule changes, B goes, C is new: one reload, starts one by one.
	{"change", []wire.Job{job(idA), job(idB)},
		[]wire.Job{job(idA, version(2), func(j *wire.Job) { j.Schedule = "0 3 * * *" }), job(idC)}, true},
	// A new node's first converge: units systemd has never loaded, no
	// reload, the timers started in one transaction (startTogether).
	{"first converge", nil, firstConvergeJobs(), false},
}

func firstConvergeJobs() []wire.Job {
	var jobs []wire.Job
	for i := range minStartTogether + 1 {
		jobs = append(jobs, job(nthID(i)))
	}
	return jobs
}

const crashEnv = "HOSTCRON_TEST_CRASH_AT"
const crashScenarioEnv = "HOSTCRON_TEST_CRASH_SCENARIO"

// TestCrashAtEveryPointOfAnApply kills (SIGKILL) a process applying a
// converge after each of its file and systemd operations in turn (the
// batched writes' staging, the one sync, every rename, the directory
// syncs, every removal, enable, reload, starts), then converges again in a
// new process's manager. At every crash point: no file is ever partial
// (each is its old or its new content), a unit file that changed implies
// the dirty marker is on disk (so systemd is reloaded before anything
// relies on it), and the next converge reaches exactly the desired state:
// the same files as an uninterrupted converge, only the desired timers
// enabled, no temp file or marker left, and a converge after it is a no-op.
func TestCrashAtEveryPointOfAnApply(t *testing.T) {
	if at := os.Getenv(crashEnv); at != "" {
		i, _ := strconv.Atoi(os.Getenv(crashScenarioEnv))
		crashChild(t, at, crashScenarios[i])
		return
	}
	for i, sc := range crashScenarios {
		t.Run(sc.name, func(t *testing.T) { crashAtEveryPoint(t, i, sc) })
	}
}

func crashAtEveryPoint(t *testing.T, scenario int, sc crashScenario) {
	crashBefore, crashAfter := sc.before, sc.after
	want := crashReference(t, sc)
	for n := 1; ; n++ {
		dir := t.TempDir()
		m, _ := managerAt(t, dir)
		if _, err := m.Apply(context.Background(), crashBefore); err != nil {
			t.Fatal(err)
		}
		before := tree(t, dir)
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashAtEveryPointOfAnApply$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashEnv+"="+strconv.Itoa(n), "HOSTCRON_TEST_CRASH_DIR="+dir,
			crashScenarioEnv+"="+strconv.Itoa(scenario))
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		killed := errors.As(err, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signaled()
		if err != nil && !killed {
			t.Fatalf("crash point %d: child failed: %v\n%s", n, err, out)
		}
		point := lastPoint(string(out))
		reloaded := strings.Contains(string(out), "\nreload\n") // systemd has read the files: the marker's job is done
		crashed := tree(t, dir)
		checkCrashState(t, n, point, before, crashed, want, reloaded || !sc.held)
		recover, f := managerAt(t, dir)
		f.runs(crashBefore...)                                                   // systemd after the crash: crashBefore's timers may still run
		recover.now = func() time.Time { return time.Now().Add(2 * TempMaxAge) } // the crash's temp files are old now
		rep, err := recover.ReconcileExactly(context.Background(), crashAfter)
		if err != nil {
			t.Fatalf("crash point %d (%s): recovery: %v", n, point, err)
		}
		if sc.held && unitFilesDiffer(before, crashed) && !reloaded && rep.Reloads != 1 {
			t.Errorf("crash point %d (%s): unit files changed before the crash, recovery did not reload: %+v", n, point, rep)
		}
		if got := tree(t, dir); !reflect.DeepEqual(got, want) {
			t.Errorf("crash point %d (%s): after recovery\n got %v\nwant %v", n, point, keys(got), keys(want))
		}
		rep, err = recover.ReconcileExactly(context.Background(), crashAfter)
		if err != nil || rep.Changed() || rep.Reloads != 0 {
			t.Errorf("crash point %d (%s): second converge not a no-op: %+v %v (calls %q)", n, point, rep, err, f.Calls())
		}
		if !killed {
			if n < 10 {
				t.Fatalf("only %d crash points", n-1)
			}
			t.Logf("%d crash points tested", n-1)
			return
		}
	}
}

// crashChild converges dir towards crashAfter and kills itself after
// its at-th operation, printing each operation's name first.
func crashChild(t *testing.T, at string, sc crashScenario) {
	n, _ := strconv.Atoi(at)
	m, f := managerAt(t, os.Getenv("HOSTCRON_TEST_CRASH_DIR"))
	f.runs(sc.before...) // systemd as the earlier apply left it
	count := 0
	var mu sync.Mutex
	afterIO = func(what string) {
		mu.Lock()
		defer mu.Unlock()
		count++
		os.Stdout.WriteString("\n" + what + "\n")
		if count == n {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	if _, err := m.ReconcileExactly(context.Background(), sc.after); err != nil {
		t.Fatal(err)
	}
}

// crashReference is the tree an uninterrupted converge leaves.
func crashReference(t *testing.T, sc crashScenario) map[string]string {
	dir := t.TempDir()
	m, _ := managerAt(t, dir)
	if _, err := m.Apply(context.Background(), sc.before); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReconcileExactly(context.Background(), sc.after); err != nil {
		t.Fatal(err)
	}
	return tree(t, dir)
}

// checkCrashState: every file is whole (old or new content) and a unit
// file that changed has the dirty marker beside it until systemd reloaded
// (or, unheld, never needed to: systemd loads them when first started).
func checkCrashState(t *testing.T, n int, point string, before, crashed, want map[string]string, reloaded bool) {
	t.Helper()
	for p, c := range crashed {
		base := filepath.Base(p)
		if strings.HasPrefix(base, atomicfile.TempPrefix) || base == dirtyMarker || strings.Contains(p, "previous") {
			continue
		}
		if old, ok := before[p]; ok && old == c {
			continue
		}
		if nw, ok := want[p]; ok && nw == c {
			continue
		}
		t.Errorf("crash point %d (%s): %s is neither its old nor its new content: %q", n, point, p, c)
	}
	if unitFilesDiffer(before, crashed) && !reloaded {
		if _, ok := crashed["jobs/"+dirtyMarker]; !ok {
			t.Errorf("crash point %d (%s): unit files changed and no dirty marker", n, point)
		}
	}
}

// unitFilesDiffer reports whether a unit file was written or removed.
func unitFilesDiffer(a, b map[string]string) bool {
	for _, m := range []map[string]string{a, b} {
		for p := range m {
			if strings.HasPrefix(p, "system/cron-") && a[p] != b[p] {
				return true
			}
		}
	}
	return false
}

// tree maps every path under dir (relative) to its content, a symlink
// to "-> target"; dir itself reads as "DIR" in contents (units name
// their spec's path).
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.Name() == lockFileName || d.Name() == turnFileName || d.Name() == withoutFileName {
			out[rel] = "(the node's unit lock: its tenure is no state)"
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			l, err := os.Readlink(p)
			out[rel] = "-> " + strings.ReplaceAll(l, dir, "DIR")
			return err
		}
		b, err := os.ReadFile(p)
		out[rel] = strings.ReplaceAll(string(b), dir, "DIR")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runs makes jobs' timers active, as systemd has them after their apply.
func (f *fakeSystemd) runs(jobs ...wire.Job) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, j := range jobs {
		f.active[j.UnitName()+".timer"] = true
	}
}

// lastPoint is the last operation a crash child printed.
func lastPoint(out string) string {
	point := ""
	for _, l := range strings.Split(out, "\n") {
		if l != "" && !strings.HasPrefix(l, "PASS") && !strings.HasPrefix(l, "ok") && !strings.HasPrefix(l, "---") && !strings.HasPrefix(l, "===") {
			point = l
		}
	}
	return point
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
