package wire

import "testing"

// Every id the core hands out has one spelling; unit names, run keys and
// API paths refuse any other.
func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"0b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b10":   true,
		"0B6F4C1E-8A53-4C8E-9D7E-3F1F0E2A9B10":   false, // upper case
		"0b6f4c1e8a534c8e9d7e3f1f0e2a9b10":       false, // no dashes
		"{0b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b10}": false,
		"0b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b10\n": false,
		"../0b6f4c1e-8a53-4c8e-9d7e-3f1f0e2a9b1": false,
		"":                                       false,
	} {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
}

// Sees is pg_visible_in_snapshot for a committed transaction.
func TestSnapshotSees(t *testing.T) {
	s := Snapshot{Xmin: 100, Xmax: 110, Xip: []uint64{103, 107}}
	for rev, want := range map[uint64]bool{0: true, 99: true, 100: true, 103: false, 105: true, 107: false, 109: true, 110: false, 500: false} {
		if got := s.Sees(rev); got != want {
			t.Errorf("Sees(%d) = %v, want %v", rev, got, want)
		}
	}
	if (Snapshot{}).Sees(0) || (Snapshot{}).Sees(1) {
		t.Error("the zero snapshot sees a write")
	}
}
