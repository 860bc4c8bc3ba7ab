package runner

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The unit's MemoryMax= is the limit. Where the kernel cannot enforce it
// for the unit (a node whose memory controller is a read-only cgroup v1
// hierarchy, as in systemd-nspawn on a hybrid host), the runner enforces
// it itself: it samples the resident memory of the command's process group
// and kills the group when it exceeds the limit. On a unified (v2) host the
// kernel enforces the limit and this watch stays off.

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

// watchMemory kills process group pgid once its resident memory exceeds
// limit bytes, and reports on the returned channel whether it did. It
// stops when done is closed.
func watchMemory(pgid int, limit int64, done <-chan struct{}) <-chan bool {
	killed := make(chan bool, 1)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				killed <- false
				return
			case <-t.C:
				if groupRSS(pgid) > limit {
					_ = syscall.Kill(-pgid, syscall.SIGKILL)
					<-done
					killed <- true
					return
				}
			}
		}
	}()
	return killed
}

// groupRSS sums the resident memory of the processes in group pgid.
func groupRSS(pgid int) int64 {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	page := int64(os.Getpagesize())
	var total int64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err != nil || g != pgid {
			continue
		}
		statm, err := os.ReadFile("/proc/" + e.Name() + "/statm")
		if err != nil {
			continue
		}
		f := strings.Fields(string(statm))
		if len(f) > 1 {
			rss, _ := strconv.ParseInt(f[1], 10, 64)
			total += rss * page
		}
	}
	return total
}
