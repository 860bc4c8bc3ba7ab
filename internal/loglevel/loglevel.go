// Package loglevel reads the level a process logs at from its
// environment, so an operator can turn on debug logs (an apply's phases,
// a converge's steps) on one node or core without a new build.
package loglevel

import (
	"fmt"
	"log/slog"
)

// Env is the variable that names the level.
const Env = "HOSTCRON_LOG_LEVEL"

// Parse reads v as slog reads a level ("debug", "info", "warn", "error",
// any case, with an optional offset such as "debug-2"); empty is info. A
// value slog does not know is an error, so a typo fails at start-up
// rather than silently logging at the wrong level.
func Parse(v string) (slog.Level, error) {
	if v == "" {
		return slog.LevelInfo, nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		return 0, fmt.Errorf("%s=%q: %w", Env, v, err)
	}
	return l, nil
}
