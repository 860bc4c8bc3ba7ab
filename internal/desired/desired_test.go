package desired

import (
	"bytes"
	"slices"
	"testing"

	"github.com/hostcron/hostcron/internal/units"
	"github.com/hostcron/hostcron/internal/wire"
)

func testJob() wire.Job {
	return wire.Job{
		ID: "0b6f1d7c-3c8e-4a57-9e0a-2f4f5c9d8e71", Tenant: "acme", Version: 1, Enabled: true, User: "acme", Group: "acme",
		Webroot: "/srv/www/acme/public", WebStorageDir: "/srv/www", Schedule: "*/5 * * * *", Timezone: "UTC",
		Command: "php artisan schedule:run", TimeoutSec: 60, MemoryMaxMB: 64,
	}
}

// The node's deny list reaches the unit in canonical form; a bad entry
// fails the translation instead of rendering a unit without it.
func TestTranslateDenyAddresses(t *testing.T) {
	u, _, err := Translate(testJob(), Node{DenyAddresses: []string{"10.1.2.3/16", "::ffff:10.0.0.7", "fd00::5"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.1.0.0/16", "10.0.0.7", "fd00::5"}; !slices.Equal(u.DenyAddresses, want) {
		t.Errorf("DenyAddresses = %q, want %q", u.DenyAddresses, want)
	}
	for _, bad := range []string{"any", "127.0.0.1", "10.0.0.1 10.0.0.2", "0.0.0.0/0"} {
		if _, _, err := Translate(testJob(), Node{DenyAddresses: []string{bad}}); err == nil {
			t.Errorf("deny address %q translated without error", bad)
		}
	}
}

// A job's environment may hold secrets: it goes into the spec (root's,
// 0600, a credential of the service) and never into a unit file, whose
// mode is 0644 and whose text systemctl cat shows anyone.
func TestTranslateEnvironmentOnlyInSpec(t *testing.T) {
	const sentinel = "s3cr3t-sentinel"
	j := testJob()
	j.Environment = map[string]string{"DB_PASSWORD": sentinel, "GREETING": "hello world"}
	u, spec, err := Translate(j, Node{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := units.Render(u, units.Paths{RunnerPath: "/usr/lib/hostcron/cron-run", OutcomePath: "/usr/lib/hostcron/cron-outcome", SpecDir: "/var/lib/hostcron/jobs"})
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string][]byte{"service": r.Service, "timer": r.Timer} {
		if bytes.Contains(text, []byte(sentinel)) || bytes.Contains(text, []byte("DB_PASSWORD")) {
			t.Errorf("the %s unit holds the job's environment:\n%s", name, text)
		}
	}
	b, err := spec.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(sentinel)) {
		t.Errorf("the spec lacks the environment:\n%s", b)
	}
}

// A desired job with a refused variable (a core older or other than this
// one) is not translated: no spec that sets LD_PRELOAD is ever written.
func TestTranslateRefusesEnvironment(t *testing.T) {
	j := testJob()
	j.Environment = map[string]string{"LD_PRELOAD": "/tmp/x.so"}
	if _, _, err := Translate(j, Node{}); err == nil {
		t.Error("a job setting LD_PRELOAD translated without error")
	}
}

// The catch-up window reaches the spec (the runner decides by it), makes
// the timer persistent, and a value the API would refuse fails the job.
func TestTranslateCatchUp(t *testing.T) {
	for _, tc := range []struct {
		window     int
		persistent bool
		ok         bool
	}{{0, false, true}, {3600, true, true}, {wire.MaxCatchUpWindowSec, true, true}, {-1, false, false}, {wire.MaxCatchUpWindowSec + 1, false, false}} {
		j := testJob()
		j.CatchUpWindowSec = tc.window
		u, spec, err := Translate(j, Node{})
		if (err == nil) != tc.ok {
			t.Fatalf("window %d: err %v, want ok %v", tc.window, err, tc.ok)
		}
		if err != nil {
			continue
		}
		if u.Persistent != tc.persistent || spec.CatchUpWindowSec != tc.window || spec.TimeoutSec != j.TimeoutSec {
			t.Errorf("window %d: persistent %v, spec window %d timeout %d", tc.window, u.Persistent, spec.CatchUpWindowSec, spec.TimeoutSec)
		}
	}
}

// TestTranslateOverlapPolicy: the policy reaches the spec (absent: an
// older core, which the runner reads as skip), a job that may wait gets a
// start timeout covering the wait (unit and spec agree), and an unknown
// policy is refused.
func TestTranslateOverlapPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy wire.OverlapPolicy
		wait   bool
		ok     bool
	}{{"", false, true}, {wire.OverlapSkip, false, true}, {wire.OverlapBufferOne, true, true}, {wire.OverlapCancelPrevious, true, true}, {"queue", false, false}} {
		j := testJob()
		j.OverlapPolicy = tc.policy
		u, spec, err := Translate(j, Node{})
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v, want ok %v", tc.policy, err, tc.ok)
			continue
		}
		if !tc.ok {
			continue
		}
		if spec.OverlapPolicy != tc.policy || (u.WaitSec > 0) != tc.wait || spec.WaitSec != u.WaitSec {
			t.Errorf("%q: spec policy %q wait %d, unit wait %d", tc.policy, spec.OverlapPolicy, spec.WaitSec, u.WaitSec)
		}
		if tc.wait && u.WaitSec <= j.TimeoutSec {
			t.Errorf("%q: wait %ds does not cover the previous run's timeout %ds", tc.policy, u.WaitSec, j.TimeoutSec)
		}
	}
}
