package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server serves /metrics on a listener of its own, never on the tenant
// API's port. Close stops it.
type Server struct {
	srv  *http.Server
	addr string
	done chan struct{}
}

// Listen serves g at addr's /metrics (port 0 picks one; Addr tells). It
// listens before it returns, so a taken address is an error at start.
func Listen(addr string, g prometheus.Gatherer, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	// Two scrapes at a time at most: on a web node the loopback listener is
	// reachable by tenants' commands too, and a scrape reads the spool and
	// the unit directory; a third caller gets 503 rather than queueing work.
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog: slogErrors{log}, ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 2,
	}))
	s := &Server{addr: ln.Addr().String(), done: make(chan struct{}), srv: &http.Server{
		Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10,
	}}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && log != nil {
			log.Error("metrics listener ended", "addr", s.addr, "err", err)
		}
	}()
	if log != nil {
		log.Info("metrics listening", "addr", s.addr)
	}
	return s, nil
}

// Addr is the address the metrics listener is bound to.
func (s *Server) Addr() string { return s.addr }

// Close stops the listener, letting a scrape in flight finish while ctx
// lasts.
func (s *Server) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	<-s.done
	if err != nil {
		return fmt.Errorf("shut down metrics listener: %w", err)
	}
	return nil
}

// slogErrors hands promhttp's errors to slog.
type slogErrors struct{ log *slog.Logger }

func (l slogErrors) Println(v ...any) {
	if l.log != nil {
		l.log.Warn("metrics scrape", "err", fmt.Sprint(v...))
	}
}
