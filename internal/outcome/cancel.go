package outcome

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hostcron/hostcron/internal/wire"
)

// Cancelled turns a report into a cancelled run when the node agent's
// cancel marker names this run and the very activation this hook ends
// (invocation: systemd's $INVOCATION_ID). Only a run that ended the way a
// stop ends it (a signal, an exit code, a failure to finish, a timeout
// racing the stop) becomes cancelled: a run that succeeded before the stop
// reached it, a platform error or a skip keeps its own result. The marker
// is root's and the invocation systemd's, so a tenant can make no other
// run of its job read as cancelled than the one it asked to cancel.
func Cancelled(r wire.Outcome, mk *wire.CancelMarker, invocation string) wire.Outcome {
	if mk == nil || invocation == "" || mk.InvocationID != invocation || mk.RunKey != r.RunKey || !r.Result.IsFailure() {
		return r
	}
	r.Result = wire.ResultCancelled
	r.FailureReason = "cancelled on request at " + mk.At.UTC().Format(time.RFC3339)
	return r
}

// maxMarker bounds a cancel marker; the agent writes about 200 bytes.
const maxMarker = 4 << 10

// ReadCancelMarker reads the unit's cancel marker from dir (wire.CancelDir);
// nil when there is none.
func ReadCancelMarker(dir, unit string) (*wire.CancelMarker, error) {
	f, err := os.Open(filepath.Join(dir, unit+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cancel marker: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxMarker))
	if err != nil {
		return nil, fmt.Errorf("cancel marker: %w", err)
	}
	var mk wire.CancelMarker
	if err := json.Unmarshal(b, &mk); err != nil {
		return nil, fmt.Errorf("cancel marker %s: %w", f.Name(), err)
	}
	return &mk, nil
}
