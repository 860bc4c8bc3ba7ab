// Command outcomes measures how many outcomes per second the core API
// records over HTTP: it registers a shard, nodes, tenants and jobs through
// the admin API, then, for each core API it is given (one with group
// commits, one with a transaction per outcome), posts distinct outcomes
// from several workers for a fixed time, and a top-of-minute burst: one
// outcome of every burst job for the same slot, from three simulated
// nodes at once. It prints one table; the burst rows count, in the
// database, what was recorded against what was acknowledged.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	apis       = flag.String("apis", "batched=http://127.0.0.1:8080", "comma-separated mode=URL of core APIs on the same database")
	adminKey   = flag.String("admin-key", os.Getenv("HOSTCRON_ADMIN_KEY"), "admin API key")
	dsn        = flag.String("database-url", "", "the core's database, to count what the burst recorded (empty: not counted)")
	jobs       = flag.Int("jobs", 200, "cron jobs to spread the steady outcomes over")
	duration   = flag.Duration("duration", 10*time.Second, "how long each steady round posts")
	workers    = flag.String("workers", "8,32", "comma-separated concurrency levels")
	burstJobs  = flag.Int("burst-jobs", 10000, "jobs of the top-of-minute burst, one outcome each (0: no burst)")
	burstNodes = flag.Int("burst-nodes", 3, "simulated nodes posting the burst")
	burstConc  = flag.Int("burst-conc", 16, "concurrent posts per simulated node")
)

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 60 * time.Second}

// post sends one request; it returns the status (0: no answer) and body.
func post(method, url, auth string, body any) (int, []byte) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if strings.HasPrefix(auth, "Bearer ") {
		req.Header.Set("Authorization", auth)
	} else {
		req.Header.Set("X-API-Key", auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func call(base, method, path, auth string, body any, out any) {
	code, data := post(method, base+path, auth, body)
	if code < 200 || code >= 300 {
		log.Fatalf("%s %s: %d %s", method, path, code, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			log.Fatal(err)
		}
	}
}

type idResp struct {
	ID         string `json:"id"`
	Credential string `json:"credential"`
}

type setupResult struct {
	nodes     []string // bearer credentials
	jobIDs    []string // the steady rounds'
	burstJobs []string
}

// setup registers one shard with burstNodes nodes and tenants of at most
// 1000 jobs (the per-tenant cap), created by 8 workers.
func setup(base string) setupResult {
	suffix := fmt.Sprint(time.Now().UnixNano() % 1e9)
	var shard idResp
	call(base, "POST", "/api/v1/admin/shards", *adminKey, map[string]string{"name": "bench-" + suffix, "web_storage_dir": "/srv/bench"}, &shard)
	var res setupResult
	for i := 0; i < max(1, *burstNodes); i++ {
		var n idResp
		call(base, "POST", "/api/v1/admin/shards/"+shard.ID+"/nodes", *adminKey, map[string]string{"name": fmt.Sprintf("bench-node-%s-%d", suffix, i)}, &n)
		res.nodes = append(res.nodes, "Bearer "+n.Credential)
	}
	all := createJobs(base, shard.ID, suffix, *jobs+*burstJobs)
	res.jobIDs, res.burstJobs = all[:*jobs], all[*jobs:]
	return res
}

func createJobs(base, shardID, suffix string, n int) []string {
	type tenant struct{ id, webroot string }
	var tenants []tenant
	for t := 0; t*1000 < n; t++ {
		var tn, wr idResp
		name := fmt.Sprintf("bench%s%d", suffix, t)
		call(base, "POST", "/api/v1/admin/tenants", *adminKey, map[string]string{"name": name, "shard_id": shardID, "linux_user": name}, &tn)
		call(base, "POST", "/api/v1/admin/tenants/"+tn.ID+"/webroots", *adminKey, map[string]string{"path": "/srv/bench/" + name + "/www"}, &wr)
		tenants = append(tenants, tenant{tn.ID, wr.ID})
	}
	ids := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				t := tenants[i/1000]
				var j idResp
				call(base, "POST", "/api/v1/tenants/"+t.id+"/cron-jobs", *adminKey, map[string]any{
					"webroot_id": t.webroot, "schedule": "* * * * *", "command": "true", "max_failures": 0}, &j)
				ids[i] = j.ID
			}
		}()
	}
	wg.Wait()
	return ids
}

// outcome is the body a node posts for job's run at slot.
func outcome(job string, slot time.Time, result string) map[string]any {
	return map[string]any{"run_key": fmt.Sprintf("%s#scheduled#%s", job, slot.Format(time.RFC3339)), "version": 1,
		"scheduled_at": slot, "started_at": slot, "finished_at": slot.Add(time.Second), "result": result}
}

// steady posts distinct outcomes (one slot per second from epoch, jobs in
// turn) from conc workers for the duration.
func steady(base, node string, jobIDs []string, conc int, epoch time.Time) (lat []time.Duration) {
	var seq atomic.Int64
	var mu sync.Mutex
	deadline := time.Now().Add(*duration)
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			for time.Now().Before(deadline) {
				i := seq.Add(1)
				job := jobIDs[int(i)%len(jobIDs)]
				result := "success"
				if i%7 == 0 {
					result = "exit_code"
				}
				start := time.Now()
				call(base, "POST", "/internal/v1/cron-jobs/"+job+"/outcome", node, outcome(job, epoch.Add(time.Duration(i)*time.Second), result), nil)
				local = append(local, time.Since(start))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return lat
}

type burstResult struct {
	took              time.Duration
	acked, duplicates int64 // 200 answers; of them, duplicate: true
	retried           int64 // posts answered with no 200 and sent again, as a node's spool does
	lat               []time.Duration
}

// burst posts one outcome of every job for slot, the jobs dealt to the
// simulated nodes in turn (the elected node of each), each node posting
// with burstConc at once; an answer other than 200 is posted again, as the
// node's spool would.
func burst(base string, nodes, jobIDs []string, slot time.Time) burstResult {
	var r burstResult
	var mu sync.Mutex
	start := time.Now()
	var wg sync.WaitGroup
	for n, node := range nodes {
		var next atomic.Int64
		for w := 0; w < *burstConc; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var local []time.Duration
				for k := int(next.Add(1) - 1); k*len(nodes)+n < len(jobIDs); k = int(next.Add(1) - 1) {
					job := jobIDs[k*len(nodes)+n]
					t0 := time.Now()
					for {
						code, data := post("POST", base+"/internal/v1/cron-jobs/"+job+"/outcome", node, outcome(job, slot, "success"))
						if code == http.StatusOK {
							if strings.Contains(string(data), `"duplicate":true`) {
								atomic.AddInt64(&r.duplicates, 1)
							}
							break
						}
						atomic.AddInt64(&r.retried, 1)
						time.Sleep(100 * time.Millisecond) // a spool's backoff, shortened
					}
					local = append(local, time.Since(t0))
				}
				mu.Lock()
				r.lat = append(r.lat, local...)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	r.took = time.Since(start)
	r.acked = int64(len(r.lat))
	return r
}

// recorded counts the runs the database holds for slot, and the run keys
// among them held more than once.
func recorded(slot time.Time) (runs, doubled int64) {
	if *dsn == "" {
		return -1, -1
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, *dsn)
	if err != nil {
		log.Fatalf("count runs: %v", err)
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT count(*), count(*) - count(DISTINCT (cron_job_id, run_key)) FROM cron_job_runs WHERE scheduled_at = $1 AND result <> 'lost'`,
		slot).Scan(&runs, &doubled)
	if err != nil {
		log.Fatalf("count runs: %v", err)
	}
	return runs, doubled
}

func pct(l []time.Duration, p float64) float64 {
	if len(l) == 0 {
		return 0
	}
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return float64(l[int(float64(len(l)-1)*p)].Microseconds()) / 1000
}

func main() {
	flag.Parse()
	type api struct{ mode, url string }
	var targets []api
	for _, a := range strings.Split(*apis, ",") {
		mode, url, ok := strings.Cut(a, "=")
		if !ok {
			log.Fatalf("-apis: %q is not mode=URL", a)
		}
		targets = append(targets, api{mode, url})
	}
	var levels []int
	if err := json.Unmarshal([]byte("["+*workers+"]"), &levels); err != nil {
		log.Fatalf("-workers: %v", err)
	}
	s := setup(targets[0].url)
	// Slots from 150 days back (run retention is 180): each round its own
	// five days of seconds, so no two rounds share a run key.
	base := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -150)
	round := 0
	fmt.Printf("| mode | load | outcomes | seconds | outcomes/s | p50 ms | p99 ms | lost | doubled |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range levels {
		for _, t := range targets {
			lat := steady(t.url, s.nodes[0], s.jobIDs, c, base.AddDate(0, 0, 5*round))
			round++
			fmt.Printf("| %s | steady, %d workers | %d | %.1f | %.0f | %.1f | %.1f | | |\n", t.mode, c, len(lat), duration.Seconds(),
				float64(len(lat))/duration.Seconds(), pct(lat, 0.5), pct(lat, 0.99))
		}
	}
	if *burstJobs == 0 {
		return
	}
	// Each mode's burst has a slot of its own, chosen before any runs: a
	// slot computed per mode could be another's a minute later. Every
	// burst job first gets one outcome, untimed, of an older slot: the
	// first outcome of a job also starts its lost-run sweep, which only
	// the first mode would otherwise pay for.
	top := time.Now().UTC().Truncate(time.Minute)
	burst(targets[len(targets)-1].url, s.nodes, s.burstJobs, top.Add(-time.Duration(len(targets)+1)*time.Minute))
	for i, t := range targets {
		slot := top.Add(-time.Duration(i+1) * time.Minute)
		r := burst(t.url, s.nodes, s.burstJobs, slot)
		runs, doubled := recorded(slot)
		fmt.Printf("| %s | burst, %d jobs from %d nodes x %d | %d | %.2f | %.0f | %.1f | %.1f | %d | %d |\n", t.mode, len(s.burstJobs),
			len(s.nodes), *burstConc, r.acked, r.took.Seconds(), float64(r.acked)/r.took.Seconds(), pct(r.lat, 0.5), pct(r.lat, 0.99),
			int64(len(s.burstJobs))-runs, doubled+r.duplicates)
		if r.retried > 0 {
			fmt.Printf("|  | (%s: %d posts answered without 200 and sent again) | | | | | | | |\n", t.mode, r.retried)
		}
	}
}
