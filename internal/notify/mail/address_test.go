package mail

import "testing"

// TestCheckAddress: only a bare address on a dotted host name reaches the
// relay; literals and single labels would route mail into the platform's
// own network, the rest into extra headers or recipients.
func TestCheckAddress(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"ops@example.com", true},
		{"first.last+cron@mail.tenant-site.co.uk", true},
		{"a@[10.0.0.5]", false},
		{"a@[IPv6:::1]", false},
		{"a@localhost", false},
		{"a@postgres", false},
		{"a@10.0.0.5", false},
		{"a@127.1", false},
		{"a@-bad.example", false},
		{"a@bad-.example", false},
		{"a@under_score.example", false},
		{"a@example..com", false},
		{"Owner <owner@example.com>", false},
		{"owner@example.com\r\nBcc: x@example.com", false},
		{"a@example.com, b@example.com", false},
		{"ówner@example.com", false},
		{"", false},
	} {
		got, err := CheckAddress(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("CheckAddress(%q) = %q, %v; want ok=%v", tc.in, got, err, tc.ok)
		}
		if tc.ok && got != tc.in {
			t.Errorf("CheckAddress(%q) = %q, want it unchanged", tc.in, got)
		}
	}
}
