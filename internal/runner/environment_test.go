package runner

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hostcron/hostcron/internal/jobspec"
)

func TestJobEnv(t *testing.T) {
	for _, tc := range []struct {
		name          string
		vars          map[string]string
		kept, dropped []string
	}{
		{"none", nil, nil, nil},
		{"sorted", map[string]string{"B": "2", "A": "x=y"}, []string{"A=x=y", "B=2"}, nil},
		{"refused dropped", map[string]string{"LD_PRELOAD": "/x.so", "HOSTCRON_SLOT": "x", "BASH_ENV": "/x", "OK": "1"},
			[]string{"OK=1"}, []string{"BASH_ENV", "HOSTCRON_SLOT", "LD_PRELOAD"}},
		{"bad names and values dropped", map[string]string{"A-B": "1", "NUL": "a\x00b", "BAD": "\xff", "PATH": "/bin"},
			[]string{"PATH=/bin"}, []string{"A-B", "BAD", "NUL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept, dropped := jobEnv(tc.vars)
			if !slices.Equal(kept, tc.kept) || !slices.Equal(dropped, tc.dropped) {
				t.Errorf("got kept %q dropped %q, want %q and %q", kept, dropped, tc.kept, tc.dropped)
			}
		})
	}
}

func TestCommandEnv(t *testing.T) {
	for _, tc := range []struct {
		name                string
		inherited, job, run []string
		want                []string
	}{
		{"plumbing and inherited HOSTCRON_ removed",
			[]string{"PATH=/usr/bin", "CREDENTIALS_DIRECTORY=/run/c", "RUNTIME_DIRECTORY=/run/r", "HOSTCRON_SLOT=forged"},
			nil, []string{"HOSTCRON_SLOT=real"},
			[]string{"PATH=/usr/bin", "HOSTCRON_SLOT=real"}},
		{"job wins over inherited, once",
			[]string{"PATH=/usr/bin", "HOME=/home/a", "LANG=C"},
			[]string{"HOME=/srv/a", "PATH=/opt/bin:/usr/bin"}, []string{"HOSTCRON_TENANT=a"},
			[]string{"LANG=C", "HOME=/srv/a", "PATH=/opt/bin:/usr/bin", "HOSTCRON_TENANT=a"}},
		{"runner wins over job",
			nil, []string{"HOSTCRON_TENANT=forged"}, []string{"HOSTCRON_TENANT=a"},
			[]string{"HOSTCRON_TENANT=a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := commandEnv(tc.inherited, tc.job, tc.run); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRunPassesJobEnvironment runs a command with a spec's environment:
// its variables reach the command, a refused one does not, and the
// runner's HOSTCRON_ variables cannot be overridden.
func TestRunPassesJobEnvironment(t *testing.T) {
	env, locks := setup(t, `printf '%s|%s|%s|%s\n' "$GREETING" "${#DB_PASSWORD}" "${LD_PRELOAD-unset}" "$HOSTCRON_TENANT" > env-out`)
	editSpec(t, env, func(s *jobspec.Spec) {
		s.Environment = map[string]string{"GREETING": "hello world", "DB_PASSWORD": "s3cr3t-sentinel",
			"LD_PRELOAD": "/nonexistent.so", "HOSTCRON_TENANT": "forged"}
	})
	if code := Run(env); code != 0 {
		t.Fatalf("exit %d, record %+v", code, record(t, env))
	}
	out, err := os.ReadFile(filepath.Join(filepath.Dir(locks), "www", "env-out"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(out)), "hello world|15|unset|acme"; got != want {
		t.Errorf("command saw %q, want %q", got, want)
	}
}
