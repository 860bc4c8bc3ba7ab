package unitmgr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Systemd is the handful of systemd manager calls the unit manager makes.
// The production implementation is DBus; tests use a fake.
type Systemd interface {
	Reload(ctx context.Context) error
	EnableUnitFiles(ctx context.Context, files []string) error
	DisableUnitFiles(ctx context.Context, files []string) error
	StartUnit(ctx context.Context, name string) error
	// StartUnits starts the units in one transaction and returns when
	// none of their start jobs is left; it says nothing of each unit's
	// result (the caller reads their states).
	StartUnits(ctx context.Context, names []string) error
	StopUnit(ctx context.Context, name string) error
	RestartUnit(ctx context.Context, name string) error
	// ListUnits returns the loaded units matching the patterns and, when
	// states is not empty, in one of those states (load, active or sub
	// state, as systemd matches them).
	ListUnits(ctx context.Context, states, patterns []string) ([]LoadedUnit, error)
	// UnitProperty reads one property; unitType "" reads the generic Unit
	// interface (e.g. NeedDaemonReload), "Timer" or "Service" the type's own.
	UnitProperty(ctx context.Context, unit, unitType, name string) (any, error)
}

// LoadedUnit is what systemd says about one loaded unit.
type LoadedUnit struct {
	Name        string
	LoadState   string // loaded, not-found, ...
	ActiveState string // active, inactive, failed, ...
	// JobType is the job systemd has queued for the unit ("" none): a
	// timer whose start waits (ordered after time-sync.target at boot) is
	// still inactive, but starts when its job runs.
	JobType string
}

// DBus talks to systemd over D-Bus. When systemd or the bus restarted
// (daemon-reexec, a dbus restart) the connection is dead for good; DBus
// then dials a new one and retries the call once.
type DBus struct {
	conns redialer[*sd.Conn]
}

// DialDBus connects to systemd (its private socket when root, else the
// system bus).
func DialDBus(ctx context.Context) (*DBus, error) {
	d := &DBus{conns: redialer[*sd.Conn]{dial: dialSystemd}}
	if _, err := d.conns.current(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// dialSystemd connects to systemd's private socket when root, the system
// bus otherwise (or if that fails). go-systemd's NewWithContext tries the
// bus first; through dbus-daemon, a converge starting 10,000 timers with
// calls in flight lost systemd mid-way ("Message recipient disconnected
// from message bus without replying", issue 16 bench), and every call
// and signal makes two hops instead of one.
func dialSystemd(ctx context.Context) (*sd.Conn, error) {
	if os.Geteuid() == 0 {
		c, err := dialPrivate(ctx) // every unit's signals: only JobRemoved is kept
		if err == nil {
			return c, nil
		}
		slog.Warn("systemd's private socket refused; using the system bus", "err", err)
	}
	return sd.NewWithContext(ctx)
}

// Close closes the current connection.
func (d *DBus) Close() { d.conns.close() }

func (d *DBus) do(ctx context.Context, fn func(*sd.Conn) error) error { return d.conns.do(ctx, fn) }

// conn is what redialer needs of a connection.
type conn interface {
	Connected() bool
	Close()
}

// redialer holds one connection and replaces it when it died.
type redialer[C conn] struct {
	dial   func(context.Context) (C, error)
	mu     sync.Mutex
	conn   C
	ok     bool // conn is set
	closed bool // close was called: no more dials
}

// errClosed is a call after close: the agent is stopping.
var errClosed = errors.New("connection to systemd closed: the agent is stopping")

// current returns a live connection, dialling when there is none or the
// one we have was closed under us (not after close: a call in flight
// when the agent stops, such as a daemon-reload it waits for, must not
// dial again and ask systemd a second time).
func (r *redialer[C]) current(ctx context.Context) (C, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		var none C
		return none, errClosed
	}
	if r.ok && r.conn.Connected() {
		return r.conn, nil
	}
	if r.ok {
		r.conn.Close()
		r.ok = false
	}
	c, err := r.dial(ctx)
	if err != nil {
		return c, fmt.Errorf("connect to systemd: %w", err)
	}
	r.conn, r.ok = c, true
	return c, nil
}

// drop closes c if it is still the current connection, so the next call
// dials a new one.
func (r *redialer[C]) drop(c C) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ok && any(r.conn) == any(c) {
		r.conn.Close()
		r.ok = false
	}
}

func (r *redialer[C]) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.ok {
		r.conn.Close()
		r.ok = false
	}
}

// do runs fn on a live connection; if the call failed because the
// connection died, it re-dials once and retries. Every call made through
// do is idempotent (reload, enable, start of a started unit, ...), so a
// retry after a call that may have reached systemd is harmless.
func (r *redialer[C]) do(ctx context.Context, fn func(C) error) error {
	c, err := r.current(ctx)
	if err != nil {
		return err
	}
	err = fn(c)
	if err == nil || !(errors.Is(err, dbus.ErrClosed) || !c.Connected()) {
		return err // systemd answered: its refusal is the result
	}
	r.drop(c)
	if c, err = r.current(ctx); err != nil {
		return err
	}
	return fn(c)
}

// Reload is daemon-reload.
func (d *DBus) Reload(ctx context.Context) error {
	return d.do(ctx, func(c *sd.Conn) error { return c.ReloadContext(ctx) })
}

// EnableUnitFiles enables unit files (not runtime, force: replace links).
func (d *DBus) EnableUnitFiles(ctx context.Context, files []string) error {
	return d.do(ctx, func(c *sd.Conn) error {
		_, _, err := c.EnableUnitFilesContext(ctx, files, false, true)
		return err
	})
}

// DisableUnitFiles disables unit files.
func (d *DBus) DisableUnitFiles(ctx context.Context, files []string) error {
	return d.do(ctx, func(c *sd.Conn) error {
		_, err := c.DisableUnitFilesContext(ctx, files, false)
		return err
	})
}

// StartUnit queues a start job (mode replace) without waiting for it.
func (d *DBus) StartUnit(ctx context.Context, name string) error {
	return d.do(ctx, func(c *sd.Conn) error {
		_, err := c.StartUnitContext(ctx, name, "replace", nil)
		return err
	})
}

// startJobsPoll is how often StartUnits asks systemd whether the start
// jobs are done: ListJobs is one call whatever the number of units.
const startJobsPoll = 50 * time.Millisecond

// StartUnits starts names in one transaction: a transient oneshot
// service (/bin/true) that Wants= them, so systemd loads every unit and
// queues every start job in one StartTransientUnit call instead of one
// call, and one load, per unit. A transient target would need no
// process, but systemd 252 (Debian 12) refuses transient targets. Wants=
// is what makes a unit that cannot load or start not fail the others
// (systemd drops it from the transaction, or its job alone fails); no
// After=, so the service's own job does not wait for thousands of jobs
// (each job's end would re-check its ordering against all of them). The
// service exits at once and systemd collects it: nothing is left to
// stop, even if the agent dies here. Wants= is never propagated on stop,
// so stopping a timer later is unaffected.
func (d *DBus) StartUnits(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	name := fmt.Sprintf("hostcron-start-%d-%d.service", os.Getpid(), startSeq.Add(1))
	props := []sd.Property{
		{Name: "Description", Value: dbus.MakeVariant(fmt.Sprintf("hostcron: start %d timers", len(names)))},
		{Name: "DefaultDependencies", Value: dbus.MakeVariant(false)},
		{Name: "Wants", Value: dbus.MakeVariant(names)},
		sd.PropType("oneshot"),
		sd.PropExecStart([]string{"/bin/true"}, false),
	}
	err := d.do(ctx, func(c *sd.Conn) error {
		_, err := c.StartTransientUnitContext(ctx, name, "replace", props, nil)
		return err
	})
	if err != nil {
		return fmt.Errorf("start transient %s: %w", name, err)
	}
	// The wait has its own bound: a timer's start job may wait long
	// (ordered after time-sync.target at boot), and the converge holds the
	// manager's lock meanwhile. Jobs still queued then run on their own;
	// the caller starts one by one (merging into the queued job) whatever
	// it does not see active.
	wctx, cancel := context.WithTimeout(ctx, startJobsWait)
	defer cancel()
	if err := d.waitJobs(wctx, names); err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			slog.Warn("start jobs still queued; not waiting longer", "timers", len(names), "waited", startJobsWait)
			return nil
		}
		return err
	}
	return nil
}

// startJobsWait bounds how long StartUnits waits for its start jobs.
const startJobsWait = time.Minute

// startSeq makes the transient units' names unique within the agent.
var startSeq atomic.Uint64

// waitJobs returns when systemd has no job left for any of names.
func (d *DBus) waitJobs(ctx context.Context, names []string) error {
	ours := make(map[string]bool, len(names))
	for _, n := range names {
		ours[n] = true
	}
	for {
		var pending bool
		err := d.do(ctx, func(c *sd.Conn) error {
			jobs, err := c.ListJobsContext(ctx)
			for _, j := range jobs {
				pending = pending || ours[j.Unit]
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("list jobs: %w", err)
		}
		if !pending {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for start jobs: %w", ctx.Err())
		case <-time.After(startJobsPoll):
		}
	}
}

// StopUnit queues a stop job.
func (d *DBus) StopUnit(ctx context.Context, name string) error {
	return d.do(ctx, func(c *sd.Conn) error {
		_, err := c.StopUnitContext(ctx, name, "replace", nil)
		return err
	})
}

// RestartUnit queues a restart job.
func (d *DBus) RestartUnit(ctx context.Context, name string) error {
	return d.do(ctx, func(c *sd.Conn) error {
		_, err := c.RestartUnitContext(ctx, name, "replace", nil)
		return err
	})
}

// ListUnits lists loaded units by states and name patterns.
func (d *DBus) ListUnits(ctx context.Context, states, patterns []string) ([]LoadedUnit, error) {
	var out []LoadedUnit
	err := d.do(ctx, func(c *sd.Conn) error {
		us, err := c.ListUnitsByPatternsContext(ctx, states, patterns)
		if err != nil {
			return err
		}
		out = make([]LoadedUnit, len(us))
		for i, u := range us {
			out[i] = LoadedUnit{Name: u.Name, LoadState: u.LoadState, ActiveState: u.ActiveState, JobType: u.JobType}
		}
		return nil
	})
	return out, err
}

// UnitProperty reads one property of a unit.
func (d *DBus) UnitProperty(ctx context.Context, unit, unitType, name string) (any, error) {
	var v any
	err := d.do(ctx, func(c *sd.Conn) error {
		var p *sd.Property
		var err error
		if unitType == "" {
			p, err = c.GetUnitPropertyContext(ctx, unit, name)
		} else {
			p, err = c.GetUnitTypePropertyContext(ctx, unit, unitType, name)
		}
		if err != nil {
			return err
		}
		v = p.Value.Value()
		return nil
	})
	return v, err
}
