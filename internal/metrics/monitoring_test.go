package metrics

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

type fakeOutbox struct{}

func (fakeOutbox) OutboxDepth(context.Context) (int64, time.Time, bool, error) {
	return 1, time.Now(), true, nil
}

// exported gathers both binaries' registries, with every vector touched
// once so that each metric shows, and returns every series name a query
// may use: a histogram's _bucket, _sum and _count, a counter's or gauge's
// own name. It fails if a described metric did not show, so a new metric
// cannot hide from the checks below.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	core, node := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
	c := NewCore(core)
	c.InitShards([]string{"s"})
	c.Requests.WithLabelValues("GET", "/healthz", "200")
	c.Provisionings.WithLabelValues("active")
	core.MustRegister(&OutboxCollector{Source: fakeOutbox{}})
	NewNotify(core).Attempted("email", "run_failed", "retry", "smtp")
	n := NewNode(node)
	n.ApplyDuration.WithLabelValues("apply", "ok")
	n.Steps.WithLabelValues("write")
	node.MustRegister(&NodeCollector{Sources: NodeSources{
		Timers:     func() (int, int, error) { return 1, 1, nil },
		Spool:      func() (int, int, time.Time, error) { return 0, 0, time.Time{}, nil },
		Clock:      func() (float64, time.Time, error) { return 0, time.Now(), nil },
		LogDropped: func() int64 { return 0 },
	}})
	names := map[string]bool{}
	described := map[string]bool{}
	for _, reg := range []*prometheus.Registry{core, node} {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			described[mf.GetName()] = true
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					names[mf.GetName()+s] = true
				}
				continue
			}
			names[mf.GetName()] = true
		}
	}
	var all []prometheus.Collector
	all = append(all, c.Collectors()...)
	all = append(all, n.Collectors()...)
	all = append(all, &OutboxCollector{}, &NodeCollector{})
	for _, col := range all {
		ch := make(chan *prometheus.Desc, 16)
		col.Describe(ch)
		close(ch)
		for d := range ch {
			if name := descName.FindStringSubmatch(d.String()); name == nil || !described[name[1]] {
				t.Errorf("%s did not show in the gathered registries", d)
			}
		}
	}
	return names
}

var (
	descName   = regexp.MustCompile(`fqName: "([a-z0-9_]+)"`)
	metricName = regexp.MustCompile(`\bhostcron_[a-z0-9_]+`)
)

// referenced lists the hostcron_ metric names a file mentions.
func referenced(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range metricName.FindAllString(string(b), -1) {
		seen[m] = true
	}
	var out []string
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	if len(out) == 0 {
		t.Fatalf("%s names no hostcron metric", path)
	}
	return out
}

// TestDashboardUsesOnlyExportedMetrics: the Grafana dashboard is valid
// JSON with panels that have queries, and every metric it queries is one
// core-api or the node agent registers.
func TestDashboardUsesOnlyExportedMetrics(t *testing.T) {
	const path = "../../packaging/monitoring/dashboard.json"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("a %s panel has an empty query", p.Type)
			}
			queries++
		}
	}
	if dash.Title == "" || queries == 0 {
		t.Fatalf("dashboard %q has %d queries", dash.Title, queries)
	}
	names := exported(t)
	for _, m := range referenced(t, path) {
		if !names[m] {
			t.Errorf("dashboard queries %s, which no binary exports", m)
		}
	}
}

// TestAlertRulesUseOnlyExportedMetrics: every metric the alert rules (and
// their tests' series) name is one core-api or the node agent registers;
// promtool checks the rules' logic (make test-unit).
func TestAlertRulesUseOnlyExportedMetrics(t *testing.T) {
	names := exported(t)
	for _, f := range []string{"alerts.yml", "alerts_test.yml"} {
		for _, m := range referenced(t, "../../packaging/monitoring/"+f) {
			if !names[m] {
				t.Errorf("%s names %s, which no binary exports", f, m)
			}
		}
	}
}

// TestInitShardsStartsCountersAtZero: a shard's lost and platform_error
// counters exist at 0 before its first such run (so increase() sees it),
// and InitShards leaves a counting shard's value alone.
func TestInitShardsStartsCountersAtZero(t *testing.T) {
	m := NewCore(nil)
	m.RunRecorded("a", "lost", "scheduled")
	m.InitShards([]string{"a", "b"})
	if n := testutil.CollectAndCount(m.ShardRuns); n != 4 {
		t.Errorf("%d shard series, want 4 (2 shards x lost, platform_error)", n)
	}
	if v := testutil.ToFloat64(m.ShardRuns.WithLabelValues("a", "lost")); v != 1 {
		t.Errorf("shard a lost = %v, want 1", v)
	}
	if v := testutil.ToFloat64(m.ShardRuns.WithLabelValues("b", "platform_error")); v != 0 {
		t.Errorf("shard b platform_error = %v, want 0", v)
	}
}
