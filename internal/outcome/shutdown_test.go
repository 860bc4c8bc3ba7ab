package outcome

import (
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/runner"
	"github.com/hostcron/hostcron/internal/wire"
)

func TestShutDown(t *testing.T) {
	code := 143
	for _, tc := range []struct {
		name   string
		state  string
		result wire.Result
		reason string
		want   wire.Result
	}{
		{"command killed by the stop", SystemStopping, wire.ResultSignal, "killed by TERM", wire.ResultPlatformError},
		{"command trapped TERM and exited non-zero", SystemStopping, wire.ResultExitCode, "exited with status 143", wire.ResultPlatformError},
		{"stop timeout: SIGKILL after TimeoutStopSec", SystemStopping, wire.ResultTimeout, "killed after the job's timeout", wire.ResultPlatformError},
		{"runner killed before its record was final", SystemStopping, wire.ResultFailed, "", wire.ResultPlatformError},
		{"OOM kill: the job's limit, not the stop", SystemStopping, wire.ResultOOM, "killed for exceeding the job's memory limit", wire.ResultOOM},
		{"success before the stop reached it", SystemStopping, wire.ResultSuccess, "", wire.ResultSuccess},
		{"cancelled on request", SystemStopping, wire.ResultCancelled, "cancelled on request", wire.ResultCancelled},
		{"already a platform error", SystemStopping, wire.ResultPlatformError, "shared storage hung", wire.ResultPlatformError},
		{"overlap skip", SystemStopping, wire.ResultOverlapSkipped, "", wire.ResultOverlapSkipped},
		{"running system: the tenant's failure", "running", wire.ResultSignal, "killed by TERM", wire.ResultSignal},
		{"degraded system: the tenant's failure", "degraded", wire.ResultExitCode, "exited with status 1", wire.ResultExitCode},
		{"state unknown (PID 1 not asked or not answering)", "", wire.ResultSignal, "killed by TERM", wire.ResultSignal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := wire.Outcome{RunKey: "k", Result: tc.result, FailureReason: tc.reason, ExitCode: &code}
			got := ShutDown(in, tc.state)
			if got.Result != tc.want {
				t.Fatalf("result %s, want %s", got.Result, tc.want)
			}
			if got.ExitCode == nil || *got.ExitCode != code || got.RunKey != "k" {
				t.Errorf("the run's own fields changed: %+v", got)
			}
			if got.Shutdown != (tc.want != tc.result) {
				t.Errorf("Shutdown %v: set only on the result ShutDown turned", got.Shutdown)
			}
			if tc.want != tc.result {
				if !strings.HasPrefix(got.FailureReason, "the node shut down while the run was under way: ") {
					t.Errorf("reason %q does not say the node shut down", got.FailureReason)
				}
				was := tc.reason
				if was == "" {
					was = string(tc.result)
				}
				if !strings.HasSuffix(got.FailureReason, was) {
					t.Errorf("reason %q lost what the run ended with (%q)", got.FailureReason, was)
				}
				if got.Result.IsFailure() {
					t.Error("a shutdown's stop still counts as the tenant's failure")
				}
			} else if got.FailureReason != tc.reason {
				t.Errorf("reason changed to %q", got.FailureReason)
			}
			if ShutdownMatters(in) != (tc.result.IsFailure() && tc.result != wire.ResultOOM) {
				t.Errorf("ShutdownMatters(%s) = %v", tc.result, ShutdownMatters(in))
			}
		})
	}
}

// The longest reason a report can carry (a setup error's, from the
// runner's record, at MaxReason) still fits the API's bound with the
// shutdown's words in front of it.
func TestShutDownReasonFitsTheWire(t *testing.T) {
	svc := Service{Result: "exit-code", ExitCode: "exited", ExitStatus: "1"}
	rec := runner.Record{Kind: runner.KindSetupError, RunKey: "k", Reason: strings.Repeat("é", MaxReason/2)}
	r, silent := Classify(svc, rec, true, time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	if silent || r.Result != wire.ResultFailed {
		t.Fatalf("classified %v (silent %v), want failed", r.Result, silent)
	}
	got := ShutDown(r, SystemStopping)
	if got.Result != wire.ResultPlatformError || len(got.FailureReason) > wire.MaxFailureReason {
		t.Errorf("result %s, reason of %d bytes (bound %d)", got.Result, len(got.FailureReason), wire.MaxFailureReason)
	}
}
