package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/hostcron/hostcron/internal/outcome"
	"github.com/hostcron/hostcron/internal/wire"
)

// systemStateTimeout bounds the question to PID 1, leaving the hook's
// deadline to the report's delivery or spooling.
const systemStateTimeout = time.Second

// shutDown applies PID 1's word that the node is shutting down to a
// failure (outcome.ShutDown). It asks only when the answer could change
// the report; a PID 1 that cannot be asked leaves the report as it is.
func shutDown(ctx context.Context, report wire.Outcome, log *slog.Logger) wire.Outcome {
	if !outcome.ShutdownMatters(report) {
		return report
	}
	state, err := systemState(ctx)
	if err != nil {
		log.Warn("system state not read from PID 1, reporting the run as it ended", "run_key", report.RunKey, "err", err)
		return report
	}
	if r := outcome.ShutDown(report, state); r.Result != report.Result {
		log.Info("the node is shutting down: the run's failure is the platform's", "run_key", report.RunKey, "was", report.Result)
		return r
	}
	return report
}

// systemState is PID 1's SystemState ("running", "degraded", "stopping",
// ...), asked over systemd's private socket: this hook runs as root
// (ExecStopPost=+), and the socket needs no dbus-daemon, which a node
// stops early in a shutdown.
func systemState(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, systemStateTimeout)
	defer cancel()
	conn, err := dbus.Dial("unix:path=/run/systemd/private", dbus.WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("dial systemd's private socket: %w", err)
	}
	defer conn.Close()
	if err := conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		return "", fmt.Errorf("authenticate to systemd: %w", err)
	}
	var v dbus.Variant
	err = conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
		CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, "org.freedesktop.systemd1.Manager", "SystemState").Store(&v)
	if err != nil {
		return "", fmt.Errorf("read SystemState: %w", err)
	}
	s, ok := v.Value().(string)
	if !ok {
		return "", fmt.Errorf("SystemState is a %s, not a string", v.Signature())
	}
	return s, nil
}
