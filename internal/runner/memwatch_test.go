package runner

import (
	"bufio"
	"os"
	"os/exec"
	"reflect"
	"syscall"
	"testing"
	"time"
)

func TestUnitCgroupPath(t *testing.T) {
	cases := []struct {
		name, in     string
		hier, cgPath string
	}{
		{"v2", "0::/system.slice/hostcron-acme-1.service\n", "unified", "/system.slice/hostcron-acme-1.service"},
		{"hybrid", `12:memory:/system.slice/hostcron-acme-1.service
11:pids:/system.slice/hostcron-acme-1.service
1:name=systemd:/system.slice/hostcron-acme-1.service
0::/system.slice/hostcron-acme-1.service
`, "systemd", "/system.slice/hostcron-acme-1.service"},
		{"hybrid, the systemd line after the unified one", "0::/\n1:name=systemd:/system.slice/x.service\n", "systemd", "/system.slice/x.service"},
		{"v1 without name=systemd", "4:memory:/a\n3:cpu,cpuacct:/a\n", "", ""},
		{"nspawn without cgroupns", "1:name=systemd:/hostcron-nodes/1234/node1/payload/system.slice/x.service\n0::/hostcron-nodes/1234/node1/payload/system.slice/x.service\n",
			"systemd", "/hostcron-nodes/1234/node1/payload/system.slice/x.service"},
		{"garbage", "nonsense\n\n", "", ""},
	}
	for _, tc := range cases {
		h, p := unitCgroupPath(tc.in)
		if h != tc.hier || p != tc.cgPath {
			t.Errorf("%s: got %q %q, want %q %q", tc.name, h, p, tc.hier, tc.cgPath)
		}
	}
}

func TestCgroupProcsCandidates(t *testing.T) {
	got := cgroupProcsCandidates("systemd", "/outer/payload/system.slice/x.service")
	want := []string{
		"/sys/fs/cgroup/systemd/outer/payload/system.slice/x.service/cgroup.procs",
		"/sys/fs/cgroup/systemd/payload/system.slice/x.service/cgroup.procs",
		"/sys/fs/cgroup/systemd/system.slice/x.service/cgroup.procs",
		"/sys/fs/cgroup/systemd/x.service/cgroup.procs",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("systemd: %q", got)
	}
	got = cgroupProcsCandidates("unified", "/system.slice/x.service")
	want = []string{
		"/sys/fs/cgroup/system.slice/x.service/cgroup.procs",
		"/sys/fs/cgroup/unified/system.slice/x.service/cgroup.procs",
		"/sys/fs/cgroup/x.service/cgroup.procs",
		"/sys/fs/cgroup/unified/x.service/cgroup.procs",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("unified: %q", got)
	}
	if got := cgroupProcsCandidates("", ""); got != nil {
		t.Errorf("no hierarchy: %q", got)
	}
	if got := cgroupProcsCandidates("unified", "/"); len(got) != 0 {
		t.Errorf("root cgroup: %q", got)
	}
}

func TestDecideMemory(t *testing.T) {
	const self, mb = 100, int64(1 << 20)
	cases := []struct {
		name    string
		samples []procSample
		limit   int64
		kill    bool
		victims []int
		total   int64
		hidden  int
	}{
		{"under the limit", []procSample{{PID: self, Bytes: 5 * mb}, {PID: 101, Bytes: 10 * mb}}, 32 * mb, false, nil, 15 * mb, 0},
		{"at the limit is not over it", []procSample{{PID: self, Bytes: 2 * mb}, {PID: 101, Bytes: 30 * mb}}, 32 * mb, false, nil, 32 * mb, 0},
		{"the command's group over", []procSample{{PID: self, Bytes: 5 * mb}, {PID: 101, Bytes: 40 * mb}}, 32 * mb, true, []int{101}, 45 * mb, 0},
		// A setsid child is in the cgroup like any other: it counts and goes.
		{"an escaped session over, the rest small", []procSample{{PID: self, Bytes: 5 * mb}, {PID: 101, Bytes: mb}, {PID: 300, Bytes: 200 * mb}}, 32 * mb, true, []int{101, 300}, 206 * mb, 0},
		{"many small processes add up", []procSample{{PID: self, Bytes: 5 * mb}, {PID: 101, Bytes: 10 * mb}, {PID: 102, Bytes: 10 * mb}, {PID: 103, Bytes: 10 * mb}}, 32 * mb, true, []int{101, 102, 103}, 35 * mb, 0},
		{"the runner counts too: the limit is the unit's", []procSample{{PID: self, Bytes: 20 * mb}, {PID: 101, Bytes: 13 * mb}}, 32 * mb, true, []int{101}, 33 * mb, 0},
		{"the runner is never a victim", []procSample{{PID: self, Bytes: 40 * mb}}, 32 * mb, true, nil, 40 * mb, 0},
		{"hidden processes are reported, not counted", []procSample{{PID: self, Bytes: 5 * mb}, {PID: 101, Hidden: true}}, 32 * mb, false, nil, 5 * mb, 1},
		{"a hidden process goes with the rest", []procSample{{PID: self, Bytes: 5 * mb}, {PID: 101, Hidden: true}, {PID: 102, Bytes: 40 * mb}}, 32 * mb, true, []int{101, 102}, 45 * mb, 1},
		{"no limit", []procSample{{PID: 101, Bytes: 400 * mb}}, 0, false, nil, 400 * mb, 0},
		{"nothing sampled", nil, 32 * mb, false, nil, 0, 0},
	}
	for _, tc := range cases {
		d := decideMemory(tc.samples, self, tc.limit)
		if d.Kill != tc.kill || !reflect.DeepEqual(d.Victims, tc.victims) || d.Total != tc.total || d.Hidden != tc.hidden {
			t.Errorf("%s: got %+v, want kill=%v victims=%v total=%d hidden=%d", tc.name, d, tc.kill, tc.victims, tc.total, tc.hidden)
		}
	}
}

func TestParseStatusMemory(t *testing.T) {
	status := "Name:\tphp\nVmRSS:\t   30000 kB\nRssAnon:\t   20000 kB\nRssFile:\t    9000 kB\nRssShmem:\t    1000 kB\nThreads:\t1\n"
	if n, ok := parseStatusMemory(status); !ok || n != 21000<<10 {
		t.Errorf("got %d %v", n, ok)
	}
	if _, ok := parseStatusMemory("Name:\tkthreadd\nState:\tS (sleeping)\n"); ok {
		t.Error("a kernel thread has no memory fields")
	}
}

// smaps_rollup as a 5.x/6.x kernel writes it (this format was read from
// /proc/self/smaps_rollup on the development host, Linux 6.18).
const rollupSplit = `56434c82b000-7ffcb5ab4000 ---p 00000000 00:00 0                          [rollup]
Rss:               31752 kB
Pss:               10198 kB
Pss_Dirty:          9116 kB
Pss_Anon:           9116 kB
Pss_File:             82 kB
Pss_Shmem:          1000 kB
Shared_Clean:       1600 kB
Shared_Dirty:      20000 kB
Private_Clean:        36 kB
Private_Dirty:       116 kB
Referenced:         1752 kB
Anonymous:         29116 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
`

// The same from a kernel that does not split Pss (smaps_rollup came in
// 4.14, the split later).
const rollupNoSplit = `00400000-7ffcb5ab4000 ---p 00000000 00:00 0                          [rollup]
Rss:               31752 kB
Pss:               10198 kB
Shared_Clean:       1600 kB
Shared_Dirty:      20000 kB
Private_Clean:        36 kB
Private_Dirty:       116 kB
Referenced:         1752 kB
Anonymous:         29116 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
`

func TestParseSmapsRollup(t *testing.T) {
	cases := []struct {
		name  string
		in    string
		bytes int64
		src   memSource
		ok    bool
	}{
		{"Pss_Anon + Pss_Shmem, not Pss_File or Rss", rollupSplit, 10116 << 10, memPssAnonShmem, true},
		{"no split: the whole Pss", rollupNoSplit, 10198 << 10, memPss, true},
		{"Pss_Anon alone still splits", "Pss:  50 kB\nPss_Anon:  20 kB\n", 20 << 10, memPssAnonShmem, true},
		{"empty (read of a zombie)", "", 0, memNone, false},
		{"garbage", "Pss: lots\n", 0, memNone, false},
	}
	for _, tc := range cases {
		n, src, ok := parseSmapsRollup(tc.in)
		if n != tc.bytes || src != tc.src || ok != tc.ok {
			t.Errorf("%s: got %d %v %v, want %d %v %v", tc.name, n, src, ok, tc.bytes, tc.src, tc.ok)
		}
	}
}

func TestProcMemoryFallbacks(t *testing.T) {
	status := "Name:\tphp\nRssAnon:\t   20000 kB\nRssFile:\t    9000 kB\nRssShmem:\t    1000 kB\n"
	kthread := "Name:\tkthreadd\nState:\tS (sleeping)\n"
	cases := []struct {
		name     string
		rollup   string
		rollupOK bool
		status   string
		statusOK bool
		bytes    int64
		src      memSource
		readable bool
	}{
		{"smaps_rollup wins over status", rollupSplit, true, status, true, 10116 << 10, memPssAnonShmem, true},
		{"an old kernel's Pss", rollupNoSplit, true, status, true, 10198 << 10, memPss, true},
		// A non-dumpable process of the same user: no ptrace access.
		{"smaps_rollup refused: status", "", false, status, true, 21000 << 10, memRss, true},
		{"smaps_rollup without fields: status", "nothing\n", true, status, true, 21000 << 10, memRss, true},
		{"a kernel thread or zombie counts 0", "", false, kthread, true, 0, memNone, true},
		{"neither readable: gone or hidden", "", false, "", false, 0, memNone, false},
	}
	for _, tc := range cases {
		n, src, ok := procMemory(tc.rollup, tc.rollupOK, tc.status, tc.statusOK)
		if n != tc.bytes || src != tc.src || ok != tc.readable {
			t.Errorf("%s: got %d %v %v, want %d %v %v", tc.name, n, src, ok, tc.bytes, tc.src, tc.readable)
		}
	}
}

func TestWatchInterval(t *testing.T) {
	cases := []struct{ cost, want time.Duration }{
		{0, 100 * time.Millisecond},
		{200 * time.Microsecond, 100 * time.Millisecond},
		{10 * time.Millisecond, 100 * time.Millisecond},
		{20 * time.Millisecond, 200 * time.Millisecond}, // a 1 GB job
		{300 * time.Millisecond, time.Second},
	}
	for _, tc := range cases {
		if got := watchInterval(tc.cost); got != tc.want {
			t.Errorf("watchInterval(%v) = %v, want %v", tc.cost, got, tc.want)
		}
	}
}

// A command that loads 150 MB and forks three workers (pcntl_fork,
// multiprocessing, a pre-fork server) holds ~150 MB the kernel could not
// reclaim: the pages are shared copy-on-write. Summing RssAnon per process
// counted them four times (~626 MB) and killed the run as oom, a failure
// charged to the tenant, at a 400 MB limit the kernel would allow. The
// proportional count takes them once, and still all of them.
func TestSampleGroupCountsCOWPagesOnce(t *testing.T) {
	// The parent says "ready" once its three workers run; all sleep until
	// the test kills the group (a fixed wait failed on a loaded machine,
	// where filling 150 MB took longer than it).
	py := `import os,sys,time
b=bytearray(150<<20)
for i in range(0,len(b),4096): b[i]=1
for _ in range(3):
    if os.fork()==0: time.sleep(120); os._exit(0)
print("ready", flush=True)
time.sleep(120)
`
	cmd := exec.Command("python3", "-c", py)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer cmd.Wait()
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		t.Fatalf("python3 did not start its workers: %q %v", line, err)
	}
	samples := sampleGroup(cmd.Process.Pid)
	d := decideMemory(samples, -1, 400<<20)
	if len(samples) != 4 {
		t.Fatalf("sampled %d processes, want the parent and 3 workers: %+v", len(samples), samples)
	}
	if d.Kill || d.Total < 150<<20 {
		t.Errorf("counted %d MB for ~150 MB of anonymous memory shared by 4 processes (kill at 400 MB: %v); want 150 MB and a bit, no kill", d.Total>>20, d.Kill)
	}
}

func TestSampleProcSelf(t *testing.T) {
	s, ok := sampleProc(os.Getpid())
	if !ok || s.Hidden || s.Bytes <= 0 {
		t.Errorf("own sample %+v %v", s, ok)
	}
	if _, ok := sampleProc(1 << 30); ok {
		t.Error("a PID that does not exist was sampled")
	}
}
