package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCommandsLinkOnlyTheirSide keeps each process free of the other's
// side: the core API has no D-Bus code, the node agent (on every web node)
// no database driver and no store. Both link the workflows package, so an
// import there of the store or the unit manager would pull the other side
// in; this names the package that did it.
func TestCommandsLinkOnlyTheirSide(t *testing.T) {
	const mod = "github.com/hostcron/hostcron/"
	for _, tc := range []struct {
		cmd       string
		forbidden []string // import path prefixes
	}{
		{"cmd/core-api", []string{"github.com/coreos/go-systemd", "github.com/godbus/dbus", mod + "internal/unitmgr"}},
		{"cmd/node-agent", []string{"github.com/jackc/pgx", mod + "internal/store", mod + "internal/api"}},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			for pkg, imports := range deps(t, mod+tc.cmd) {
				for _, imp := range imports {
					if hasPrefix(imp, tc.forbidden) && !hasPrefix(pkg, tc.forbidden) {
						t.Errorf("%s links %s: imported by %s", tc.cmd, imp, pkg)
					}
				}
			}
		})
	}
}

// deps is every package pkg links, with its imports.
func deps(t *testing.T, pkg string) map[string][]string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list dependencies: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	all := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		all[fields[0]] = fields[1:]
	}
	if len(all) < 10 {
		t.Fatalf("go list -deps %s listed only %d packages", pkg, len(all))
	}
	return all
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
