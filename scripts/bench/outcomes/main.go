// Command outcomes measures how many outcomes per second the core API
// records over HTTP: it registers a shard, node, tenant and jobs through the
// admin API, then posts distinct outcomes from several workers for a fixed
// time and prints a table.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

var (
	api      = flag.String("api", "http://127.0.0.1:8080", "core API base URL")
	adminKey = flag.String("admin-key", os.Getenv("HOSTCRON_ADMIN_KEY"), "admin API key")
	jobs     = flag.Int("jobs", 200, "cron jobs to spread outcomes over")
	duration = flag.Duration("duration", 10*time.Second, "how long each round posts")
	workers  = flag.String("workers", "8,32", "comma-separated concurrency levels")
)

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 30 * time.Second}

func call(method, path, auth string, body any, out any) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, *api+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if len(auth) > 7 && auth[:7] == "Bearer " {
		req.Header.Set("Authorization", auth)
	} else {
		req.Header.Set("X-API-Key", auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		log.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		log.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
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

func setup() (node string, jobIDs []string) {
	suffix := fmt.Sprint(time.Now().UnixNano() % 1e9)
	var shard, n, tenant, webroot idResp
	call("POST", "/api/v1/admin/shards", *adminKey, map[string]string{"name": "bench-" + suffix, "web_storage_dir": "/srv/bench"}, &shard)
	call("POST", "/api/v1/admin/shards/"+shard.ID+"/nodes", *adminKey, map[string]string{"name": "bench-node-" + suffix}, &n)
	call("POST", "/api/v1/admin/tenants", *adminKey, map[string]string{"name": "bench" + suffix, "shard_id": shard.ID, "linux_user": "bench"}, &tenant)
	call("POST", "/api/v1/admin/tenants/"+tenant.ID+"/webroots", *adminKey, map[string]string{"path": "/srv/bench/www"}, &webroot)
	for i := 0; i < *jobs; i++ {
		var j idResp
		call("POST", "/api/v1/tenants/"+tenant.ID+"/cron-jobs", *adminKey, map[string]any{
			"webroot_id": webroot.ID, "schedule": "* * * * *", "command": "true", "max_failures": 0}, &j)
		jobIDs = append(jobIDs, j.ID)
	}
	return "Bearer " + n.Credential, jobIDs
}

func round(node string, jobIDs []string, conc int, epoch time.Time) (count int64, lat []time.Duration) {
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
				slot := epoch.Add(time.Duration(i) * time.Minute).UTC()
				result := "success"
				if i%7 == 0 {
					result = "exit_code"
				}
				start := time.Now()
				call("POST", "/internal/v1/cron-jobs/"+job+"/outcome", node, map[string]any{
					"run_key": fmt.Sprintf("%s#%s#1", job, slot.Format(time.RFC3339)), "scheduled_at": slot,
					"started_at": slot, "finished_at": slot.Add(time.Second), "result": result}, nil)
				local = append(local, time.Since(start))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return int64(len(lat)), lat
}

func pct(l []time.Duration, p float64) time.Duration {
	sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
	return l[int(float64(len(l)-1)*p)]
}

func main() {
	flag.Parse()
	node, jobIDs := setup()
	var levels []int
	if err := json.Unmarshal([]byte("["+*workers+"]"), &levels); err != nil {
		log.Fatalf("-workers: %v", err)
	}
	fmt.Printf("| workers | outcomes | seconds | outcomes/s | p50 ms | p99 ms |\n|---:|---:|---:|---:|---:|---:|\n")
	for r, c := range levels {
		epoch := time.Date(2020+r, 1, 1, 0, 0, 0, 0, time.UTC)
		n, lat := round(node, jobIDs, c, epoch)
		fmt.Printf("| %d | %d | %.1f | %.0f | %.1f | %.1f |\n", c, n, duration.Seconds(), float64(n)/duration.Seconds(),
			float64(pct(lat, 0.5).Microseconds())/1000, float64(pct(lat, 0.99).Microseconds())/1000)
	}
}
