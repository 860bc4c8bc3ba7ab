package mail

import (
	"strings"
	"testing"
	"time"
)

// A digest keeps a disable_warning's output short: the last line of its
// tail, on the event's one line; and counts events it does not cover.
func TestDigestKeepsTailAndCountsMore(t *testing.T) {
	events := []Event{
		{ID: 1, Kind: KindRunFailed, JobName: "a", OutputTail: "ignored? no: any kind with a tail shows it"},
		{ID: 2, Kind: KindDisableWarning, JobName: "b", OutputTail: "starting\nPHP Fatal error: out of memory\n\n"},
		{ID: 3, Kind: KindDisableWarning, JobName: "c", OutputTail: strings.Repeat("x", 500)},
	}
	m := RenderDigestMore("a@b.example", "t-1", events, 20)
	if !strings.Contains(m.Body, "output=PHP Fatal error: out of memory") || strings.Contains(m.Body, "starting") {
		t.Errorf("tail line missing or not the last one:\n%s", m.Body)
	}
	if strings.Contains(m.Body, strings.Repeat("x", digestTailMax+1)) {
		t.Error("a long tail line is not cut")
	}
	if !strings.Contains(m.Body, "... and 20 more") || !strings.Contains(m.Subject, "23 notifications") {
		t.Errorf("more: subject %q body:\n%s", m.Subject, m.Body)
	}
	if RenderDigestMore("a@b.example", "t-1", events, 0).ID != RenderDigest("a@b.example", "t-1", events).ID {
		t.Error("Message-ID depends on the count of the rest")
	}
}

func TestLastLine(t *testing.T) {
	for _, tt := range []struct {
		in   string
		max  int
		want string
	}{
		{"", 10, ""},
		{"one", 10, "one"},
		{"a\nb\n", 10, "b"},
		{"a\n  b  \n\n \n", 10, "b"},
		{"abcdef", 3, "def"}, // the end of a long line: where the error is
	} {
		if got := lastLine(tt.in, tt.max); got != tt.want {
			t.Errorf("lastLine(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}

// An operator's digest names each held event's shard and count, and its
// footer says why the operator receives it (no job's settings to point at).
func TestOperatorDigestNamesShardAndCount(t *testing.T) {
	at := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	evs := []Event{
		{Kind: "platform_error", ShardID: "sh-1", ShardName: "web-1", Count: 17, At: at},
		{Kind: "slots_unrun", ShardID: "sh-2", ShardName: "web-2", Count: 3, At: at},
	}
	m := RenderDigest("ops@example.com", "", evs)
	for _, want := range []string{"shard web-1  count=17", "shard web-2  count=3", "operator notification target", "operator notification limit"} {
		if !strings.Contains(m.Body, want) {
			t.Errorf("operator digest lacks %q:\n%s", want, m.Body)
		}
	}
	if strings.Contains(m.Body, "job's settings") || strings.Contains(m.Body, "account") {
		t.Errorf("operator digest speaks of a tenant's job or account:\n%s", m.Body)
	}
}
