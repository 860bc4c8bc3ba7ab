package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A run-now's token goes back only when its transaction surely queued
// nothing; a COMMIT whose answer was lost may have committed, and a
// tenant who disconnects at that moment must not get the run for free
// (review s21e).
func TestRefundable(t *testing.T) {
	for _, c := range []struct {
		name       string
		err        error
		committing bool
		want       bool
	}{
		{"failed before the commit (412, 409, 404)", ErrPreconditionFailed, false, true},
		{"context cancelled before the commit", context.Canceled, false, true},
		{"the commit answered a rollback", pgx.ErrTxCommitRollback, true, true},
		{"the commit answered an ERROR", fmt.Errorf("commit: %w", &pgconn.PgError{Severity: "ERROR", Code: "40001"}), true, true},
		{"the client went away mid-commit", fmt.Errorf("commit: %w", context.Canceled), true, false},
		{"the connection broke mid-commit", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, true, false},
		{"a FATAL after the local commit (shutdown in a sync-rep wait)", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, true, false},
	} {
		if got := refundable(c.err, c.committing); got != c.want {
			t.Errorf("%s: refundable = %v, want %v", c.name, got, c.want)
		}
	}
}
