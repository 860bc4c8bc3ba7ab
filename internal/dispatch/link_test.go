package dispatch

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestLinkWithTemporalDown: the link reports Temporal unavailable instead
// of blocking, and gives up dialling when the process stops.
func TestLinkWithTemporalDown(t *testing.T) {
	l := &Link{Addr: "127.0.0.1:1", Namespace: "default", Log: quiet()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()

	if err := l.Check(ctx); !errors.Is(err, ErrTemporalUnavailable) {
		t.Errorf("Check = %v, want ErrTemporalUnavailable", err)
	}
	if err := l.ConvergeNode(ctx, "n1"); !errors.Is(err, ErrTemporalUnavailable) {
		t.Errorf("ConvergeNode = %v, want ErrTemporalUnavailable", err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run kept dialling after its context ended")
	}
}
