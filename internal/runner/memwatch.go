package runner

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The unit's MemoryMax= is the limit. Where the kernel cannot enforce it
// for the unit (a node whose memory controller is a read-only cgroup v1
// hierarchy, as in systemd-nspawn on a hybrid host), the runner enforces
// it itself: it samples the memory of every process in the unit's cgroup
// and, at the limit, kills all of them but itself. On a unified (v2) host
// the kernel enforces the limit and this watch stays off.
//
// The unit's cgroup, not the command's process group: a command can leave
// its process group (setsid, setpgid) but not the cgroup, whose
// cgroup.procs files in other cgroups only root may write. The runner
// counts too: the limit is the unit's. Each process counts its
// proportional share of the pages it maps (procMemory), so pages that
// processes of the unit share (copy-on-write after a fork, shared memory)
// count once, as the kernel charges them once.

// kernelEnforcesMemory reports whether this process sits in a cgroup with
// a memory limit the kernel applies.
func kernelEnforcesMemory() bool {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var limitFile string
		switch {
		case parts[0] == "0" && parts[1] == "":
			limitFile = "/sys/fs/cgroup" + parts[2] + "/memory.max"
		case strings.Contains(","+parts[1]+",", ",memory,"):
			limitFile = "/sys/fs/cgroup/memory" + parts[2] + "/memory.limit_in_bytes"
		default:
			continue
		}
		v, err := os.ReadFile(limitFile)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(v))
		if n, err := strconv.ParseUint(s, 10, 64); err == nil && n < 1<<60 {
			return true
		}
	}
	return false
}

// unitCgroupPath is the cgroup this process is in, from /proc/self/cgroup:
// the name=systemd (v1, hybrid) line if there is one, else the unified 0::
// line. "" if neither is there.
func unitCgroupPath(procSelfCgroup string) (hierarchy, cgPath string) {
	var unified string
	haveUnified := false
	for _, line := range strings.Split(procSelfCgroup, "\n") {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		switch {
		case parts[1] == "name=systemd":
			return "systemd", path.Clean(parts[2])
		case parts[0] == "0" && parts[1] == "":
			unified, haveUnified = path.Clean(parts[2]), true
		}
	}
	if haveUnified {
		return "unified", unified
	}
	return "", ""
}

// cgroupProcsCandidates lists, most likely first, the cgroup.procs files
// that may be the one of cgroup cgPath in hierarchy (from unitCgroupPath).
// The path in /proc/self/cgroup is relative to the cgroup namespace's root
// or, in a container without one, to the host's root while the container
// sees only its own subtree mounted: the path's tails are candidates too.
// The caller keeps the first that lists its own PID.
func cgroupProcsCandidates(hierarchy, cgPath string) []string {
	var mounts []string
	switch hierarchy {
	case "systemd":
		mounts = []string{"/sys/fs/cgroup/systemd"}
	case "unified":
		mounts = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}
	default:
		return nil
	}
	parts := strings.Split(strings.Trim(cgPath, "/"), "/")
	var out []string
	for i := 0; i < len(parts); i++ {
		tail := strings.Join(parts[i:], "/")
		if tail == "" {
			continue
		}
		for _, m := range mounts {
			out = append(out, m+"/"+tail+"/cgroup.procs")
		}
	}
	return out
}

// unitCgroupProcs is the cgroup.procs file of the service this process
// runs in, "" if it runs in no service's cgroup (a test, a shell): the
// memory watch then falls back to the command's process group, since
// killing a whole session's cgroup is not the runner's to do.
func unitCgroupProcs() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	h, p := unitCgroupPath(string(b))
	if !strings.HasSuffix(p, ".service") {
		return ""
	}
	self := os.Getpid()
	for _, f := range cgroupProcsCandidates(h, p) {
		pids, err := readPids(f)
		if err != nil {
			continue
		}
		for _, pid := range pids {
			if pid == self {
				return f
			}
		}
	}
	return ""
}

func readPids(file string) ([]int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var pids []int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// procSample is one process's memory as the watch saw it.
type procSample struct {
	PID int
	// Bytes the process holds that the kernel could not reclaim (no swap:
	// MemorySwapMax=0): its share of the anonymous and shared-memory pages
	// it maps (procMemory). Resident file pages (binaries, libraries,
	// mapped files) are page cache the kernel reclaims before it kills at
	// a cgroup's limit.
	Bytes int64
	// Hidden: the process is alive but its memory cannot be read (a
	// non-dumpable process under ProtectProc=invisible).
	Hidden bool
}

// memDecision is what the watch does after one sample of the unit.
type memDecision struct {
	Total   int64 // bytes counted
	Kill    bool
	Victims []int // every sampled process but the runner, when Kill
	Hidden  int   // processes whose memory could not be counted
}

// decideMemory is the watch's choice from one sample of the unit's
// processes: over the limit, every process but the runner (self) goes.
func decideMemory(samples []procSample, self int, limit int64) memDecision {
	var d memDecision
	for _, s := range samples {
		if s.Hidden {
			d.Hidden++
			continue
		}
		d.Total += s.Bytes
	}
	if limit <= 0 || d.Total <= limit {
		return d
	}
	d.Kill = true
	for _, s := range samples {
		if s.PID != self {
			d.Victims = append(d.Victims, s.PID)
		}
	}
	return d
}

// memSource says what a process's count was read from (procMemory).
type memSource int

const (
	memNone         memSource = iota // nothing readable: a kernel thread or a zombie (0 bytes)
	memPssAnonShmem                  // smaps_rollup Pss_Anon + Pss_Shmem
	memPss                           // smaps_rollup Pss: a kernel without the split
	memRss                           // status RssAnon + RssShmem: smaps_rollup unreadable
)

// kBFields sums the named "Key: N kB" fields of a /proc text, in bytes;
// found is false if none of them is there.
func kBFields(text string, keys ...string) (total int64, found bool) {
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || !slices.Contains(keys, k) {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		total += n << 10
		found = true
	}
	return total, found
}

// parseSmapsRollup reads a /proc/PID/smaps_rollup text: Pss_Anon plus
// Pss_Shmem in bytes where the kernel splits the proportional set size
// (5.x kernels), else the whole Pss.
func parseSmapsRollup(rollup string) (int64, memSource, bool) {
	if n, ok := kBFields(rollup, "Pss_Anon", "Pss_Shmem"); ok {
		return n, memPssAnonShmem, true
	}
	if n, ok := kBFields(rollup, "Pss"); ok {
		return n, memPss, true
	}
	return 0, memNone, false
}

// parseStatusMemory reads RssAnon and RssShmem (kB) from a
// /proc/PID/status text, in bytes.
func parseStatusMemory(status string) (int64, bool) {
	return kBFields(status, "RssAnon", "RssShmem")
}

// procMemory counts one process from its smaps_rollup text (rollupOK:
// it could be read) or, failing that, its status text. The watch sums the
// counts of the unit's processes, so each page must count once across
// them: proportional set size (Pss) charges a page mapped by n processes
// 1/n to each, so the pages a fork shares copy-on-write, and shared
// memory such as PHP's opcache, count once for the unit, as the kernel
// charges them once to the cgroup. In order:
//   - Pss_Anon + Pss_Shmem: the memory the kernel could not reclaim,
//     counted once. It under-counts pages shared with processes outside
//     the unit (only the unit's shares count; the kernel charges a page
//     whole to the cgroup that touched it first), which a cron job rarely
//     has.
//   - Pss (a kernel that does not split it): also the proportional share
//     of resident file pages (binaries, libraries, mapped files), which
//     the kernel would reclaim first: it over-counts by that share,
//     usually a few MB per unit, not per process.
//   - status RssAnon + RssShmem (smaps_rollup unreadable: it needs ptrace
//     access, which a non-dumpable process of the same user refuses; the
//     status file does not): every page mapped counts once per process
//     that maps it, so a forked worker's copy-on-write pages and shared
//     memory over-count by the number of processes sharing them.
//
// Neither file counts shared memory no process maps (a file on a tmpfs,
// an unattached segment), kernel memory or page tables, which the kernel
// charges to the cgroup. ok is false if the status text could not be read
// either (the process is gone, or hidden).
func procMemory(rollup string, rollupOK bool, status string, statusOK bool) (n int64, src memSource, ok bool) {
	if rollupOK {
		if n, src, found := parseSmapsRollup(rollup); found {
			return n, src, true
		}
	}
	if !statusOK {
		return 0, memNone, false
	}
	if n, found := parseStatusMemory(status); found {
		return n, memRss, true
	}
	// A kernel thread or a zombie: no memory of its own.
	return 0, memNone, true
}

// sampleProc measures one process; ok is false when it is gone.
func sampleProc(pid int) (s procSample, ok bool) {
	s.PID = pid
	dir := "/proc/" + strconv.Itoa(pid)
	rollup, rerr := os.ReadFile(dir + "/smaps_rollup")
	if n, _, found := parseSmapsRollup(string(rollup)); rerr == nil && found {
		s.Bytes = n
		return s, true
	}
	// The status file only when smaps_rollup did not answer: most samples
	// read one file per process.
	status, serr := os.ReadFile(dir + "/status")
	if n, _, readable := procMemory(string(rollup), rerr == nil, string(status), serr == nil); readable {
		s.Bytes = n
		return s, true
	}
	// Invisible under ProtectProc=invisible, or gone.
	if kerr := syscall.Kill(pid, 0); kerr == nil || errors.Is(kerr, syscall.EPERM) {
		s.Hidden = true
		return s, true
	}
	return s, false
}

// sampleCgroup measures every process listed in cgroup.procs file procs.
func sampleCgroup(procs string) []procSample {
	pids, err := readPids(procs)
	if err != nil {
		return nil
	}
	out := make([]procSample, 0, len(pids))
	for _, pid := range pids {
		if s, ok := sampleProc(pid); ok {
			out = append(out, s)
		}
	}
	return out
}

// sampleGroup measures the processes of process group pgid (the fallback
// outside a service's cgroup).
func sampleGroup(pgid int) []procSample {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procSample
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err != nil || g != pgid {
			continue
		}
		if s, ok := sampleProc(pid); ok {
			out = append(out, s)
		}
	}
	return out
}

// killCgroup sends SIGKILL to every process in cgroup.procs file procs but
// self, again while new ones show up (a process forking as it is killed).
func killCgroup(procs string, self int) {
	for round := 0; round < 50; round++ {
		pids, err := readPids(procs)
		if err != nil {
			return
		}
		left := 0
		for _, pid := range pids {
			if pid == self {
				continue
			}
			left++
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if left == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// watchInterval is the pause before the watch's next sample when the last
// one took cost. Reading smaps_rollup walks the process's page tables: a
// few microseconds for a small process, some 20 ms for one with 1 GB
// resident, against ~30 µs for the status file whatever the size
// (BenchmarkSampleSmapsRollup, BenchmarkSampleStatus). Every 100 ms the
// watch finds a runaway allocation within about 100 ms of its crossing
// the limit (a job touching 1 GB/s overshoots by
// some 100 MB before the kill, on a node the kernel does not protect),
// while a sample costing more than 10 ms stretches the pause to ten times
// its cost (at most 1 s), so the watch keeps to about a tenth of a core
// for the largest jobs instead of taking the time from them.
func watchInterval(cost time.Duration) time.Duration {
	const floor, ceiling = 100 * time.Millisecond, time.Second
	return min(max(10*cost, floor), ceiling)
}

// watchMemory enforces limit bytes over the unit: the processes in
// cgroup.procs file cgroupProcs or, when that is "", the command's
// process group pgid. At the limit it kills them all but the runner, and
// reports on the returned channel whether it did. It stops when done is
// closed.
func watchMemory(cgroupProcs string, pgid int, limit int64, done <-chan struct{}) <-chan bool {
	killed := make(chan bool, 1)
	self := os.Getpid()
	go func() {
		t := time.NewTimer(watchInterval(0))
		defer t.Stop()
		for {
			select {
			case <-done:
				killed <- false
				return
			case <-t.C:
				start := time.Now()
				var samples []procSample
				if cgroupProcs != "" {
					samples = sampleCgroup(cgroupProcs)
				} else {
					samples = sampleGroup(pgid)
				}
				d := decideMemory(samples, self, limit)
				if !d.Kill {
					t.Reset(watchInterval(time.Since(start)))
					continue
				}
				if cgroupProcs != "" {
					for _, pid := range d.Victims {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
					killCgroup(cgroupProcs, self) // and any forked since the sample
				} else {
					_ = syscall.Kill(-pgid, syscall.SIGKILL)
				}
				<-done
				killed <- true
				return
			}
		}
	}()
	return killed
}
