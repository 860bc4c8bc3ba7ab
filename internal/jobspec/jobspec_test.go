package jobspec

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCommandRoundTripsHostileText(t *testing.T) {
	hostile := []string{
		`php artisan schedule:run`,
		`echo "$HOME" '%n' \; $(id) ; rm -rf / # ` + "\t" + `%%`,
		`[Service]ExecStart=/bin/sh`,
		`echo ünïcødé ✓`,
	}
	dir := t.TempDir()
	for i, cmd := range hostile {
		if err := ValidateCommand(cmd); err != nil {
			t.Fatalf("ValidateCommand(%q): %v", cmd, err)
		}
		s := Spec{Tenant: "acme", ID: "x", Command: cmd, WorkingDirectory: "app/current", Webroot: "/srv/www/acme"}
		b, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "spec"+string(rune('a'+i)))
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := Read(p)
		if err != nil {
			t.Fatal(err)
		}
		if got.Command != cmd {
			t.Errorf("command changed on the way: %q -> %q", cmd, got.Command)
		}
		if got.Dir() != "/srv/www/acme/app/current" {
			t.Errorf("Dir() = %q", got.Dir())
		}
	}
}

func TestValidateCommandRejects(t *testing.T) {
	for _, cmd := range []string{"", "   ", "a\nb", "a\rb", "a\x00b", "a\x1bb", string([]byte{0xff, 0xfe}), string(make([]byte, MaxCommandLen+1))} {
		if err := ValidateCommand(cmd); err == nil {
			t.Errorf("ValidateCommand(%q) accepted", cmd)
		}
	}
}

func TestValidateWorkingDirectory(t *testing.T) {
	for _, ok := range []string{"", "app", "app/current", "a.b/c-d/e_f/@x+y"} {
		if err := ValidateWorkingDirectory(ok); err != nil {
			t.Errorf("%q rejected: %v", ok, err)
		}
	}
	for _, bad := range []string{"/etc", "..", "../x", "a/../../etc", "a/./b", "a//b", "a/", "a b", "a\nb", "a%n", "$HOME", "a\\b", ".hidden", "~/x", "a;b", "a\"b"} {
		if err := ValidateWorkingDirectory(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// A spec an older agent wrote (no catch-up window, or the placeholder
// "catch_up" field) reads as a job that never catches up.
func TestOldSpecReadsWithoutCatchUp(t *testing.T) {
	p := filepath.Join(t.TempDir(), "spec")
	old := `{"tenant":"acme","id":"x","version":3,"schedule":"0 * * * *","timezone":"UTC","command":"true",` +
		`"working_directory":"","webroot":"/srv/www/acme","lock_dir":"/srv/l","max_memory_mb":64,"randomized_delay_sec":15,"catch_up":""}`
	if err := os.WriteFile(p, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.CatchUpWindowSec != 0 || s.TimeoutSec != 0 || s.Version != 3 {
		t.Errorf("old spec read as %+v", s)
	}
}
