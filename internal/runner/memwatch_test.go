package runner

import (
	"os"
	"reflect"
	"testing"
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

func TestSampleProcSelf(t *testing.T) {
	s, ok := sampleProc(os.Getpid())
	if !ok || s.Hidden || s.Bytes <= 0 {
		t.Errorf("own sample %+v %v", s, ok)
	}
	if _, ok := sampleProc(1 << 30); ok {
		t.Error("a PID that does not exist was sampled")
	}
}
