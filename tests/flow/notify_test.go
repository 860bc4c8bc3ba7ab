//go:build e2e

package flow

import (
	"encoding/json"
	"io"
	"mime"
	"mime/quotedprintable"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostcron/hostcron/internal/notify"
)

// hookReceiver is a tenant's webhook endpoint: it verifies every
// signature and keeps the events by id.
type hookReceiver struct {
	t      testing.TB
	secret []byte
	mu     sync.Mutex
	events []receivedEvent
	bad    int
}

type receivedEvent struct {
	ID   int64  `json:"id"`
	Kind string `json:"kind"`
	Job  string `json:"cron_job_id"`
	Data struct {
		OutputTail string `json:"output_tail"`
	} `json:"data"`
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := notify.Verify(h.secret, body, r.Header.Get(notify.SignatureHeader), time.Now()); err != nil {
		h.bad++
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var e receivedEvent
	if err := json.Unmarshal(body, &e); err != nil {
		h.bad++
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.events = append(h.events, e)
	w.WriteHeader(http.StatusNoContent)
}

func (h *hookReceiver) snapshot() ([]receivedEvent, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]receivedEvent(nil), h.events...), h.bad
}

// TestNotifications: a job that fails on booted nodes until its
// threshold notifies a webhook of each failure, the warning one failure
// before the disable, and the auto-disable: each event exactly once,
// signed, and the deliveries show through the API.
func TestNotifications(t *testing.T) {
	const secret = "flow-webhook-secret-0123456789"
	rcv := &hookReceiver{t: t, secret: []byte(secret)}
	srv := httptest.NewServer(rcv) // 127.0.0.1: the harness's core allows private targets
	defer srv.Close()

	body, _ := json.Marshal(map[string]any{"webroot_id": c.Webroots["acme"].ID, "schedule": "0 3 * * *",
		"command": "echo failing; exit 1", "max_failures": 3, "name": "notify-flow"})
	id := call(t, "POST", "/api/v1/tenants/"+c.Tenants["acme"].ID+"/cron-jobs", string(body), 201)["id"].(string)
	waitStatus(t, id, "active", 60*time.Second)
	tb, _ := json.Marshal(map[string]any{"kind": "webhook", "url": srv.URL + "/hook", "secret": secret, "cron_job_id": id})
	target := call(t, "POST", "/api/v1/tenants/"+c.Tenants["acme"].ID+"/notification-targets", string(tb), 201)["id"].(string)
	const rcpt = "ops@acme.test"
	mb, _ := json.Marshal(map[string]any{"kind": "email", "address": rcpt, "cron_job_id": id})
	mailTarget := call(t, "POST", "/api/v1/tenants/"+c.Tenants["acme"].ID+"/notification-targets", string(mb), 201)["id"].(string)

	for i := 1; i <= 3; i++ {
		call(t, "POST", "/api/v1/cron-jobs/"+id+"/run-now", "", 202)
		waitRuns(t, id, i, 90*time.Second)
	}
	waitStatus(t, id, "auto_disabled", 60*time.Second)

	want := map[string]int{"run_failed": 3, "disable_warning": 1, "auto_disabled": 1}
	// The disable_warning waits for its output to reach Loki (15 s, at
	// most once more until it is a minute old).
	deadline := time.Now().Add(120 * time.Second)
	for {
		got, _ := rcv.snapshot()
		if len(got) >= 5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // a duplicate would come within this
	got, bad := rcv.snapshot()
	kinds := map[string]int{}
	seen := map[int64]bool{}
	for _, e := range got {
		kinds[e.Kind]++
		if seen[e.ID] {
			t.Errorf("event %d delivered twice", e.ID)
		}
		seen[e.ID] = true
		if e.Job != id {
			t.Errorf("event of another job: %+v", e)
		}
		if e.Kind == "disable_warning" && !strings.Contains(e.Data.OutputTail, "failing") {
			// The worker waits for the node's shipper before reading the
			// tail, so the run's own output must be in it.
			t.Errorf("disable_warning output tail %q, want the run's output (failing)", e.Data.OutputTail)
		}
	}
	if bad != 0 || len(got) != 5 || kinds["run_failed"] != 3 || kinds["disable_warning"] != 1 || kinds["auto_disabled"] != 1 {
		t.Errorf("receiver got %v (%d requests refused), want %v", kinds, bad, want)
	}
	ds := call(t, "GET", "/api/v1/notification-targets/"+target+"/deliveries", "", 200)["deliveries"].([]any)
	var states []string
	for _, d := range ds {
		states = append(states, d.(map[string]any)["state"].(string))
	}
	sort.Strings(states)
	if len(ds) != 5 || states[0] != "delivered" || states[4] != "delivered" {
		t.Errorf("deliveries: %v", states)
	}
	call(t, "DELETE", "/api/v1/notification-targets/"+target, "", 204)
	checkMails(t, rcpt, id)
	call(t, "DELETE", "/api/v1/notification-targets/"+mailTarget, "", 204)
}

// checkMails: the relay got one mail per event for rcpt, each event once
// (a Message-ID is the event's, stable across retries), and no other.
func checkMails(t *testing.T, rcpt, jobID string) {
	t.Helper()
	deadline := time.Now().Add(120 * time.Second) // the disable_warning waits for its output tail

	for len(mail.to(rcpt)) < 5 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // a duplicate would come within this
	kinds := map[string]int{}
	ids := map[string]bool{}
	var dec mime.WordDecoder
	msgs := mail.to(rcpt)
	for _, m := range msgs {
		subject, err := dec.DecodeHeader(m.Header.Get("Subject"))
		if err != nil {
			t.Errorf("subject %q: %v", m.Header.Get("Subject"), err)
		}
		body, _ := io.ReadAll(quotedprintable.NewReader(m.Body))
		if !strings.Contains(string(body), jobID) {
			t.Errorf("mail %q does not name job %s:\n%s", subject, jobID, body)
		}
		if id := m.Header.Get("Message-Id"); ids[id] {
			t.Errorf("mail %s (%q) sent twice", id, subject)
		} else {
			ids[id] = true
		}
		switch {
		case strings.HasSuffix(subject, `" failed`):
			kinds["run_failed"]++
		case strings.Contains(subject, "will be disabled after one more failure"):
			kinds["disable_warning"]++
		case strings.Contains(subject, "was disabled after repeated failures"):
			kinds["auto_disabled"]++
		default:
			kinds[subject]++
		}
	}
	if len(msgs) != 5 || kinds["run_failed"] != 3 || kinds["disable_warning"] != 1 || kinds["auto_disabled"] != 1 || len(mail.bad) != 0 {
		t.Errorf("relay got %d mails for %s: %v (%d unparsable)", len(msgs), rcpt, kinds, len(mail.bad))
	}
}

// waitRuns polls a job's runs until it has n.
func waitRuns(t testing.TB, id string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		runs := recordedRuns(t, id)
		if len(runs) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: %d runs after %v, want %d", id, len(runs), timeout, n)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
