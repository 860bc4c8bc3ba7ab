// Command hostcronctl is the command line for people: operators and
// tenants drive cron jobs, runs, logs, previews and API keys through the
// core's public API. Tables by default, -o json for scripts (the API's
// own answer, indented).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hostcron/hostcron/internal/apiclient"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot(os.Stdout, os.Stderr, os.Getenv)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "hostcronctl:", clean(err.Error()))
		os.Exit(1)
	}
}

// settings are where and as whom to call, after flags, environment and
// the config file were weighed.
type settings struct {
	API, Key, Tenant string
}

// fileConfig is the config file (JSON): {"api": ..., "key": ..., "tenant": ...}.
type fileConfig struct {
	API    string `json:"api"`
	Key    string `json:"key"`
	Tenant string `json:"tenant"`
}

// resolve picks each setting from the first source that has it: a flag,
// then the environment, then the config file.
func resolve(flags settings, env func(string) string, file fileConfig) settings {
	first := func(vals ...string) string {
		for _, v := range vals {
			if v != "" {
				return v
			}
		}
		return ""
	}
	return settings{
		API:    first(flags.API, env("HOSTCRON_API"), file.API),
		Key:    first(flags.Key, env("HOSTCRON_API_KEY"), file.Key),
		Tenant: first(flags.Tenant, env("HOSTCRON_TENANT"), file.Tenant),
	}
}

// defaultConfigPath is $XDG_CONFIG_HOME/hostcron/ctl.json, else
// ~/.config/hostcron/ctl.json.
func defaultConfigPath(env func(string) string) string {
	if d := env("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "hostcron", "ctl.json")
	}
	if h := env("HOME"); h != "" {
		return filepath.Join(h, ".config", "hostcron", "ctl.json")
	}
	return ""
}

// readConfig reads the config file; a missing default file is no error,
// a missing file the user named is.
func readConfig(path string, named bool) (fileConfig, error) {
	var fc fileConfig
	if path == "" {
		return fc, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !named {
		return fc, nil
	}
	if err != nil {
		return fc, fmt.Errorf("config: %w", err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(os.Stderr, "hostcronctl: warning: %s (it may hold a key) is readable by others; chmod 600 it\n", path)
	}
	if err := json.Unmarshal(b, &fc); err != nil {
		return fc, fmt.Errorf("config %s: %w", path, err)
	}
	return fc, nil
}

// app is what every command shares: the client, the settings, where to
// print and how.
type app struct {
	client   *apiclient.Client
	set      settings
	out, err io.Writer
	output   string // table or json
}

func newRoot(stdout, stderr io.Writer, env func(string) string) *cobra.Command {
	a := &app{out: stdout, err: stderr}
	var flags settings
	var configPath string
	var allowHTTP bool
	root := &cobra.Command{
		Use:           "hostcronctl",
		Short:         "Drive hostcron cron jobs through the core API",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.output != "table" && a.output != "json" {
				return fmt.Errorf("--output: want table or json, not %q", a.output)
			}
			named := cmd.Flags().Changed("config")
			if !named {
				configPath = defaultConfigPath(env)
			}
			fc, err := readConfig(configPath, named)
			if err != nil {
				return err
			}
			a.set = resolve(flags, env, fc)
			if a.set.API != "" && !allowHTTP {
				if err := apiclient.CheckBaseURL(a.set.API); err != nil {
					return err
				}
			}
			a.client = &apiclient.Client{BaseURL: a.set.API, Key: a.set.Key}
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&flags.API, "api", "", "core API base URL (env HOSTCRON_API)")
	pf.StringVar(&flags.Key, "key", "", "API key (env HOSTCRON_API_KEY; prefer the env or the config file to a flag, which other users can see)")
	pf.StringVar(&flags.Tenant, "tenant", "", "tenant id for tenant-wide commands (env HOSTCRON_TENANT)")
	pf.StringVar(&configPath, "config", "", "config file (default $XDG_CONFIG_HOME/hostcron/ctl.json)")
	pf.StringVarP(&a.output, "output", "o", "table", "table or json")
	pf.BoolVar(&allowHTTP, "allow-http", false, "allow a plain-http API address on another machine (the key travels in the clear)")
	root.AddCommand(a.jobsCmd(), a.runsCmd(), a.slotsCmd(), a.logsCmd(), a.previewCmd(), a.keysCmd())
	return root
}

// tenant returns the tenant a tenant-wide command works on.
func (a *app) tenant() (string, error) {
	if a.set.Tenant == "" {
		return "", errors.New("no tenant: set --tenant, HOSTCRON_TENANT or the config file")
	}
	return a.set.Tenant, nil
}
