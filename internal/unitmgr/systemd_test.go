package unitmgr

import (
	"context"
	"errors"
	"testing"

	"github.com/godbus/dbus/v5"
)

type fakeConn struct {
	id     int
	alive  bool
	closed bool
}

func (c *fakeConn) Connected() bool { return c.alive }
func (c *fakeConn) Close()          { c.alive, c.closed = false, true }

func TestRedialer(t *testing.T) {
	ctx := context.Background()
	dials := 0
	r := redialer[*fakeConn]{dial: func(context.Context) (*fakeConn, error) {
		dials++
		return &fakeConn{id: dials, alive: true}, nil
	}}
	refused := errors.New("unit not found")
	cases := []struct {
		name      string
		fn        func(c *fakeConn) error // called per attempt
		wantErr   error
		wantDials int
		wantCalls int
	}{
		{"first call dials", func(*fakeConn) error { return nil }, nil, 1, 1},
		{"a refusal is returned, no redial", func(*fakeConn) error { return refused }, refused, 1, 1},
		{"systemd restarted: redial and retry once", func(c *fakeConn) error {
			if c.id == 1 {
				c.alive = false // the bus went away under the call
				return errors.New("read: connection reset")
			}
			return nil
		}, nil, 2, 2},
		{"closed again: the second failure is returned", func(c *fakeConn) error {
			return dbus.ErrClosed
		}, dbus.ErrClosed, 3, 2},
	}
	for _, tc := range cases {
		calls := 0
		err := r.do(ctx, func(c *fakeConn) error { calls++; return tc.fn(c) })
		if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) || dials != tc.wantDials || calls != tc.wantCalls {
			t.Errorf("%s: err %v dials %d calls %d, want %v %d %d", tc.name, err, dials, calls, tc.wantErr, tc.wantDials, tc.wantCalls)
		}
	}
}

// After close nothing dials again: a call in flight when the agent stops
// (a daemon-reload it waits for) fails instead of asking systemd twice.
func TestRedialerDoesNotDialAfterClose(t *testing.T) {
	dials := 0
	r := redialer[*fakeConn]{dial: func(context.Context) (*fakeConn, error) {
		dials++
		return &fakeConn{id: dials, alive: true}, nil
	}}
	calls := 0
	err := r.do(context.Background(), func(c *fakeConn) error {
		calls++
		r.close() // the agent stops mid-call
		return dbus.ErrClosed
	})
	if !errors.Is(err, errClosed) || dials != 1 || calls != 1 {
		t.Errorf("err %v, dials %d, calls %d; want errClosed, 1, 1", err, dials, calls)
	}
	if err := r.do(context.Background(), func(*fakeConn) error { calls++; return nil }); !errors.Is(err, errClosed) || dials != 1 {
		t.Errorf("a call after close: %v, %d dials", err, dials)
	}
}
