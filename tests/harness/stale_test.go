package harness

import (
	"slices"
	"testing"
)

func TestStaleRuns(t *testing.T) {
	running := map[int]bool{200: true, 300: true}
	for _, tc := range []struct {
		name  string
		names []string
		self  int
		want  []int
	}{
		{"nothing of ours", []string{"systemd", "hostcron-nodes", "lock"}, 100, nil},
		{"a live run is kept", []string{"hostcron-e2e-200", "hostcron-e2e-200-shared", "hostcron-e2e-200-bin"}, 100, nil},
		{"a dead run, once for all its directories", []string{"hostcron-e2e-400", "hostcron-e2e-400-shared", "hostcron-e2e-400-trust"}, 100, []int{400}},
		{"only siblings left", []string{"hostcron-e2e-401-pg"}, 100, []int{401}},
		{"our own PID's leftovers (a PID come round again)", []string{"hostcron-e2e-100", "hostcron-e2e-200"}, 100, []int{100}},
		{"sorted, among live runs", []string{"hostcron-e2e-900", "hostcron-e2e-300", "hostcron-e2e-500-bin", "hostcron-e2e-200"}, 100, []int{500, 900}},
		{"names we never make", []string{"hostcron-e2e-reap.lock", "hostcron-e2e-", "hostcron-e2e-0", "hostcron-e2e-007", "hostcron-e2e--5", "hostcron-e2e-12x"}, 100, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := staleRuns(tc.names, tc.self, func(pid int) bool { return running[pid] })
			if !slices.Equal(got, tc.want) {
				t.Errorf("staleRuns(%q) = %v, want %v", tc.names, got, tc.want)
			}
		})
	}
}

func TestIsTestBinary(t *testing.T) {
	for cmdline, want := range map[string]bool{
		"/tmp/go-build123/b001/e2e.test\x00-test.v\x00-test.timeout=80m\x00": true,
		"/tmp/go-build123/b001/flow.test\x00":                                true,
		"/usr/sbin/sshd\x00-D\x00":                                           false,
		"":                                                                   false,
		"bash\x00-c\x00x.test\x00":                                           false,
	} {
		if got := isTestBinary([]byte(cmdline)); got != want {
			t.Errorf("isTestBinary(%q) = %v, want %v", cmdline, got, want)
		}
	}
}
