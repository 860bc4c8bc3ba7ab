package unitmgr

import (
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// TestJobSignals: the private socket's handler passes go-systemd JobRemoved
// (its job-completion channels) and drops the signals nothing subscribed
// to; closing the connection closes the registered channel, as godbus's
// default handler does (go-systemd's dispatcher then ends).
func TestJobSignals(t *testing.T) {
	h := newJobSignals()
	ch := make(chan *dbus.Signal, 10)
	h.AddSignal(ch)
	for _, name := range []string{
		"org.freedesktop.systemd1.Manager.UnitNew",
		"org.freedesktop.DBus.Properties.PropertiesChanged",
		"org.freedesktop.systemd1.Manager.JobNew",
		jobRemoved,
		"org.freedesktop.systemd1.Manager.UnitRemoved",
	} {
		i := strings.LastIndex(name, ".")
		h.DeliverSignal(name[:i], name[i+1:], &dbus.Signal{Name: name, Path: "/org/freedesktop/systemd1"})
	}
	select {
	case s := <-ch:
		if s.Name != jobRemoved {
			t.Fatalf("delivered %s", s.Name)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("JobRemoved not delivered")
	}
	select {
	case s := <-ch:
		t.Fatalf("delivered %s too", s.Name)
	default:
	}
	var _ dbus.Terminator = h
	h.Terminate()
	if _, open := <-ch; open {
		t.Fatal("channel not closed by Terminate")
	}
}
