package store

import "testing"

func TestAnnounceCures(t *testing.T) {
	cases := []struct {
		name, message, node string
		want                bool
	}{
		{"the shard had no node", NoNodeMessage, "node1", true},
		{"failed on this node", "not provisioned on node1: activity StartToClose timeout", "node1", true},
		{"failed on this node and another", "not provisioned on node2: connection refused; node1: timeout", "node1", true},
		{"failed on this node first of two", "not provisioned on node1: timeout; node2: connection refused", "node1", true},
		{"refused by this node's tombstone", "not provisioned on node1: refused by the node's tombstone (it removed the job at this version or later; a converge lifts a wrong one)", "node1", true},
		{"failed on another node only", "not provisioned on node2: connection refused", "node1", false},
		{"a name that begins with this one", "not provisioned on node10: timeout", "node1", false},
		{"this name inside another's cause, not as a node", "not provisioned on node2: dial node1:7443 refused", "node1", false},
		{"a bare name (older messages)", "not provisioned on node1", "node1", true},
		{"a bare other name", "not provisioned on node2", "node1", false},
		{"no node named", "something else failed", "node1", false},
		{"empty message", "", "node1", false},
		{"no name", "not provisioned on node1: x", "", false},
	}
	for _, tc := range cases {
		if got := announceCures(tc.message, tc.node); got != tc.want {
			t.Errorf("%s: announceCures(%q, %q) = %v, want %v", tc.name, tc.message, tc.node, got, tc.want)
		}
	}
}
