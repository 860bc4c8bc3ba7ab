package desired

import (
	"slices"
	"testing"

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
