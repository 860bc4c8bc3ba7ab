package unitmgr

import (
	"context"
	"os"
	"strconv"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// jobRemoved is the one signal go-systemd's Conn acts on when nothing is
// subscribed: it completes the channel a caller may pass to StartUnit and
// the like (the agent passes none; the signal still reaches go-systemd so
// that such a call would work).
const jobRemoved = "org.freedesktop.systemd1.Manager.JobRemoved"

// signalRouter is what godbus needs of a connection's signal handler for
// go-systemd (Conn.Signal registers a channel; Close terminates it).
type signalRouter interface {
	dbus.SignalHandler
	dbus.SignalRegistrar
	dbus.Terminator
}

// jobSignals is the signal handler of the agent's connections to systemd's
// private socket: godbus's default handler, given JobRemoved only. systemd
// sends every signal to every client of its private socket, subscribed or
// not (sd-bus's bus_foreach_bus: "Send to all direct buses,
// unconditionally"): UnitNew, PropertiesChanged, JobNew, JobRemoved of
// every unit, several for each of the 10,000 timers a converge starts.
// go-systemd reads them from a channel of 100, and the default handler
// delivers each signal that channel cannot take at once from a goroutine
// of its own that waits for room: mid-converge on a booted node, about 500
// such goroutines held their signals (issue 16, docs/benchmarks.md). The
// agent never subscribes (go-systemd's Subscribe, SubscribeUnits, which
// would need UnitNew and PropertiesChanged), so nothing read the others.
type jobSignals struct{ signalRouter }

func newJobSignals() jobSignals {
	return jobSignals{dbus.NewDefaultSignalHandler()}
}

// DeliverSignal passes JobRemoved on and drops every other signal.
func (h jobSignals) DeliverSignal(iface, name string, s *dbus.Signal) {
	if s.Name != jobRemoved {
		return
	}
	h.signalRouter.DeliverSignal(iface, name, s)
}

// dialPrivate is go-systemd's NewSystemdConnectionContext (systemd's
// private socket, EXTERNAL authentication by uid, no Hello) with
// jobSignals as each connection's signal handler.
func dialPrivate(ctx context.Context) (*sd.Conn, error) {
	return sd.NewConnection(func() (*dbus.Conn, error) {
		c, err := dbus.Dial("unix:path=/run/systemd/private", dbus.WithContext(ctx), dbus.WithSignalHandler(newJobSignals()))
		if err != nil {
			return nil, err
		}
		if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	})
}
