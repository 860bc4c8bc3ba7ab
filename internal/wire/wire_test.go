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
