package core

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/pgtest"
	"github.com/hostcron/hostcron/internal/store"
)

// TestMetricsOnTheirOwnListener: /metrics is served on MetricsAddr, with
// the request metric of an API call made before, the outbox depth read
// from the database and the existing shard's run counters at 0, and not
// on the tenant API's port; Stop closes it.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	db := pgtest.NewDB(t)
	ctx := context.Background()
	st, err := store.Open(ctx, db.DSN, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	shard, err := st.CreateShard(ctx, "web-1", "/srv/shared/www")
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(ctx, Config{DatabaseURL: db.DSN, Listen: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0", Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx)
	if c.MetricsAddr() == "" || c.MetricsAddr() == c.Addr() {
		t.Fatalf("metrics on %q, API on %q: want a listener of its own", c.MetricsAddr(), c.Addr())
	}
	if code, err := get(t, "http://"+c.Addr()+"/healthz"); err != nil || code != http.StatusOK {
		t.Fatalf("GET /healthz: %d, %v", code, err)
	}
	if code, err := get(t, "http://"+c.Addr()+"/metrics"); err != nil || code != http.StatusNotFound {
		t.Errorf("GET /metrics on the API port: %d, %v; want 404", code, err)
	}
	initialised := `hostcron_shard_runs_total{result="platform_error",shard="` + shard.ID + `"} 0`
	var b []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + c.MetricsAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), initialised) || time.Now().After(deadline) {
			break // the shard loop's first round runs at start, beside the first scrape
		}
	}
	for _, want := range []string{
		initialised, `hostcron_shard_runs_total{result="lost",shard="` + shard.ID + `"} 0`,
		`hostcron_runs_total{result="lost",trigger="scheduled"} 0`,
		`hostcron_api_request_duration_seconds_count{code="200",method="GET",route="/healthz"} 1`,
		"hostcron_outbox_pending 0", "hostcron_outbox_scrape_ok 1", "hostcron_outbox_oldest_pending_age_seconds 0",
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := get(t, "http://"+c.MetricsAddr()+"/metrics"); err == nil {
		t.Error("metrics still served after Stop")
	}
}
