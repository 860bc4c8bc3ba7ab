package harness

import (
	"slices"
	"testing"
)

func TestStaleRuns(t *testing.T) {
	held := map[int]bool{200: true, 300: true}
	for _, tc := range []struct {
		name  string
		names []string
		want  []int
	}{
		{"nothing of ours", []string{"systemd", "hostcron-nodes", "lock"}, nil},
		{"a live run is kept", []string{"hostcron-e2e-200", "hostcron-e2e-200-shared", "hostcron-e2e-200-bin"}, nil},
		{"a dead run, once for all its directories", []string{"hostcron-e2e-400", "hostcron-e2e-400-shared", "hostcron-e2e-400-trust"}, []int{400}},
		{"only siblings left", []string{"hostcron-e2e-401-pg"}, []int{401}},
		{"sorted, among live runs", []string{"hostcron-e2e-900", "hostcron-e2e-300", "hostcron-e2e-500-bin", "hostcron-e2e-200"}, []int{500, 900}},
		{"a PID that extends a live one's is its own run", []string{"hostcron-e2e-2000", "hostcron-e2e-20-bin"}, []int{20, 2000}},
		{"names we never make", []string{"hostcron-e2e-reap.lock", "hostcron-e2e-", "hostcron-e2e-0", "hostcron-e2e-007", "hostcron-e2e--5", "hostcron-e2e-12x"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := staleRuns(tc.names, func(pid int) bool { return held[pid] })
			if !slices.Equal(got, tc.want) {
				t.Errorf("staleRuns(%q) = %v, want %v", tc.names, got, tc.want)
			}
		})
	}
}

func TestCmdlineNames(t *testing.T) {
	for _, tc := range []struct {
		cmdline, s string
		want       bool
	}{
		{"/usr/lib/postgresql/15/bin/postgres\x00-D\x00/run/hostcron-e2e-4-pg/data\x00", "/run/hostcron-e2e-4-pg", true},
		{"/usr/lib/postgresql/15/bin/postgres\x00-D\x00/run/hostcron-e2e-40-pg/data\x00", "/run/hostcron-e2e-4-pg", false},
		{"/usr/sbin/sshd\x00-D\x00", "/run/hostcron-e2e-4-pg", false},
		{"", "/run/hostcron-e2e-4-pg", false},
		{"anything\x00", "", false},
	} {
		if got := cmdlineNames([]byte(tc.cmdline), tc.s); got != tc.want {
			t.Errorf("cmdlineNames(%q, %q) = %v, want %v", tc.cmdline, tc.s, got, tc.want)
		}
	}
}
