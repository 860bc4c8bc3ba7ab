package main

import "testing"

func TestMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		env   string
		limit int64
		set   bool
	}{
		{"", defaultMemoryLimit, true},
		{"200MiB", 0, false}, // the operator's, applied by the runtime
		{"off", 0, false},
	} {
		if limit, set := memoryLimit(tc.env); limit != tc.limit || set != tc.set {
			t.Errorf("GOMEMLIMIT=%q: %d %v, want %d %v", tc.env, limit, set, tc.limit, tc.set)
		}
	}
}
