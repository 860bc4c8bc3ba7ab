// Command scale measures the core API's memory with many jobs in its
// database: it reads the process's VmRSS, seeds N active jobs with
// set-based SQL (tenants of 1,000 jobs, a typical mix of schedules, their
// lost-run sweep ten minutes behind so the first passes have work), then
// lists every tenant's jobs over HTTP for a while (the API's default page,
// 1,000 jobs, and pages of 100) while the core's own sweep runs, sampling
// the process's VmRSS every second, and prints a table row per reading.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	api      = flag.String("api", "http://127.0.0.1:8080", "core API base URL")
	adminKey = flag.String("admin-key", os.Getenv("HOSTCRON_ADMIN_KEY"), "admin API key")
	dsn      = flag.String("dsn", "", "the core's database")
	pid      = flag.Int("pid", 0, "core-api's process id")
	jobs     = flag.Int("jobs", 100000, "jobs to seed")
	duration = flag.Duration("duration", 60*time.Second, "how long to list while sampling")
)

// status reads kB fields of /proc/PID/status.
func status(field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", *pid))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				log.Fatal(err)
			}
			return v
		}
	}
	log.Fatalf("no %s in /proc/%d/status", field, *pid)
	return 0
}

func mb(kb int64) string { return fmt.Sprintf("%.1f MB", float64(kb)/1024) }

func seed(ctx context.Context) []string {
	c, err := pgx.Connect(ctx, *dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	tenants := (*jobs + 999) / 1000
	for _, q := range []string{
		`INSERT INTO shards (name, web_storage_dir) VALUES ('scale', '/srv/shared/www')`,
		// A node: the sweep records lost runs only on a shard that has one.
		`INSERT INTO nodes (shard_id, name, credential_hash)
			SELECT id, 'scale-node', sha256(gen_random_uuid()::text::bytea) FROM shards WHERE name = 'scale'`,
		`INSERT INTO tenants (name, shard_id, linux_user, linux_group)
			SELECT 'scale' || g, (SELECT id FROM shards WHERE name = 'scale'), 'scale' || g, 'scale' || g
			FROM generate_series(1, ` + strconv.Itoa(tenants) + `) g`,
		`INSERT INTO webroots (tenant_id, path) SELECT id, '/srv/shared/www/' || name || '/public' FROM tenants`,
		// The mix: 40 % every 5 minutes, 20 % every 15, 10 % every 10,
		// 30 % hourly; the sweep ten minutes behind.
		`INSERT INTO cron_jobs (tenant_id, webroot_id, schedule, command, working_directory, timeout_seconds,
				status, swept_until, not_before, created_at)
			SELECT w.tenant_id, w.id,
				(ARRAY['*/5 * * * *','*/5 * * * *','*/5 * * * *','*/5 * * * *','*/15 * * * *','*/15 * * * *',
				       '*/10 * * * *','0 * * * *','0 * * * *','0 * * * *'])[g % 10 + 1],
				'php artisan schedule:run >> storage/logs/cron.log 2>&1', 'current', 300,
				'active', now() - interval '10 minutes', now() - interval '10 minutes', now() - interval '1 day' + g * interval '1 ms'
			FROM generate_series(1, ` + strconv.Itoa(*jobs) + `) g
			JOIN tenants t ON t.name = 'scale' || ((g - 1) / 1000 + 1)
			JOIN webroots w ON w.tenant_id = t.id`,
		`VACUUM ANALYZE`,
	} {
		if _, err := c.Exec(ctx, q); err != nil {
			log.Fatalf("seed: %v", err)
		}
	}
	rows, err := c.Query(ctx, `SELECT id::text FROM tenants WHERE name LIKE 'scale%' ORDER BY name`)
	if err != nil {
		log.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		log.Fatal(err)
	}
	return ids
}

// list reads all of a tenant's jobs, limit a page; it returns the pages.
func list(tenant string, limit int) int {
	cursor, pages := "", 0
	for {
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		req, _ := http.NewRequest("GET", *api+"/api/v1/tenants/"+tenant+"/cron-jobs?"+q.Encode(), nil)
		req.Header.Set("X-API-Key", *adminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			log.Fatalf("list: %d %s", resp.StatusCode, data)
		}
		var page struct {
			Jobs []json.RawMessage `json:"cron_jobs"`
			Next *string           `json:"next_cursor"`
		}
		if err := json.Unmarshal(data, &page); err != nil {
			log.Fatal(err)
		}
		pages++
		if page.Next == nil {
			return pages
		}
		cursor = *page.Next
	}
}

func main() {
	flag.Parse()
	ctx := context.Background()
	fmt.Println("| core-api reading | VmRSS | VmHWM |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| started, empty database | %s | %s |\n", mb(status("VmRSS")), mb(status("VmHWM")))
	start := time.Now()
	tenants := seed(ctx)
	log.Printf("seeded %d jobs in %d tenants in %s", *jobs, len(tenants), time.Since(start).Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	fmt.Printf("| %d jobs seeded (SQL, beside it) | %s | %s |\n", *jobs, mb(status("VmRSS")), mb(status("VmHWM")))
	var maxRSS int64
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Second):
				if v := status("VmRSS"); v > maxRSS {
					maxRSS = v
				}
			}
		}
	}()
	deadline := time.Now().Add(*duration)
	pages := map[int]int{}
	for round := 0; time.Now().Before(deadline); round++ {
		limit := 1000
		if round%2 == 1 {
			limit = 100
		}
		for _, t := range tenants {
			pages[limit] += list(t, limit)
		}
	}
	close(done)
	c, err := pgx.Connect(ctx, *dsn)
	if err != nil {
		log.Fatal(err)
	}
	var lost int64
	if err := c.QueryRow(ctx, `SELECT count(*) FROM cron_job_runs WHERE result = 'lost'`).Scan(&lost); err != nil {
		log.Fatal(err)
	}
	c.Close(ctx)
	fmt.Printf("| after %s listing every tenant (%d pages of 1,000, %d of 100) while the core's sweep recorded %d lost runs | %s (largest sampled %s) | %s |\n",
		duration.String(), pages[1000], pages[100], lost, mb(status("VmRSS")), mb(maxRSS), mb(status("VmHWM")))
}
