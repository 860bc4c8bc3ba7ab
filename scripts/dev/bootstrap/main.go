// Command bootstrap registers a dev platform through the admin API: one
// shard, its nodes (writing each node's config), a tenant with a webroot
// and a tenant API key. It prints shell variables for scripts/dev.sh.
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
	"path/filepath"
	"strings"

	"github.com/hostcron/hostcron/internal/nodeconf"
)

var (
	api      = flag.String("api", "http://127.0.0.1:8080", "core API")
	adminKey = flag.String("admin-key", os.Getenv("HOSTCRON_ADMIN_KEY"), "admin key")
	nodes    = flag.String("nodes", "node1,node2,node3", "node names")
	confDir  = flag.String("node-config-dir", "", "write <node>.json here")
	temporal = flag.String("temporal", "127.0.0.1:7233", "Temporal address for the agents")
	loki     = flag.String("loki", "", "Loki URL for the agents (optional)")
)

func post(path string, body any) map[string]any {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, *api+path, bytes.NewReader(b))
	req.Header.Set("X-API-Key", *adminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		log.Fatalf("POST %s: %s %s", path, resp.Status, out)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		log.Fatal(err)
	}
	return m
}

func main() {
	flag.Parse()
	shard := post("/api/v1/admin/shards", map[string]string{"name": "web-1", "web_storage_dir": "/srv/shared/www"})["id"].(string)
	for _, n := range strings.Split(*nodes, ",") {
		node := post("/api/v1/admin/shards/"+shard+"/nodes", map[string]string{"name": n})
		cfg := nodeconf.Config{APIURL: *api, Credential: node["credential"].(string), NodeName: n,
			NodeID: node["id"].(string), TemporalAddress: *temporal, LokiURL: *loki, WebStorageDir: "/srv/shared/www"}
		b, _ := json.MarshalIndent(cfg, "", "  ")
		if err := os.WriteFile(filepath.Join(*confDir, n+".json"), b, 0o600); err != nil {
			log.Fatal(err)
		}
	}
	tenant := post("/api/v1/admin/tenants", map[string]string{"name": "acme", "shard_id": shard, "linux_user": "acme"})["id"].(string)
	webroot := post("/api/v1/admin/tenants/"+tenant+"/webroots", map[string]string{"path": "/srv/shared/www/acme/public"})["id"].(string)
	key := post("/api/v1/admin/api-keys", map[string]string{"tenant_id": tenant})["key"].(string)
	fmt.Printf("SHARD_ID=%s\nTENANT_ID=%s\nWEBROOT_ID=%s\nTENANT_KEY=%s\n", shard, tenant, webroot, key)
}
