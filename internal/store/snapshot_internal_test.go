package store

import (
	"reflect"
	"testing"

	"github.com/hostcron/hostcron/internal/wire"
)

func TestParseSnapshot(t *testing.T) {
	for text, want := range map[string]wire.Snapshot{
		"100:100:":        {Xmin: 100, Xmax: 100},
		"100:110:103,107": {Xmin: 100, Xmax: 110, Xip: []uint64{103, 107}},
	} {
		got, err := parseSnapshot(text)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parseSnapshot(%q) = %+v, %v; want %+v", text, got, err, want)
		}
	}
	for _, bad := range []string{"", "1:2", "a:2:", "1:2:x", "-1:2:"} {
		if _, err := parseSnapshot(bad); err == nil {
			t.Errorf("parseSnapshot(%q) accepted", bad)
		}
	}
}
