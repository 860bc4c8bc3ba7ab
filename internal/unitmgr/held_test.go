package unitmgr

import (
	"bytes"
	"testing"
)

// TestHeldCopy: a plan holds an unchanged file's bytes read from disk (no
// second copy) and a changed or new file's content at its exact size,
// never the buffer it was rendered in.
func TestHeldCopy(t *testing.T) {
	have := []byte("[Timer]\nOnCalendar=daily\n")
	want := make([]byte, len(have), 4*len(have))
	copy(want, have)
	if got := heldCopy(have, want); &got[0] != &have[0] {
		t.Error("an unchanged file is held twice")
	}
	changed := append(make([]byte, 0, 256), "[Timer]\nOnCalendar=hourly\n"...)
	for _, h := range [][]byte{nil, have} {
		got := heldCopy(h, changed)
		if !bytes.Equal(got, changed) || cap(got) >= cap(changed) || &got[0] == &changed[0] {
			t.Errorf("have %q: want an exact-size copy of the wanted content, got %q (cap %d)", h, got, cap(got))
		}
	}
	if got := heldCopy(nil, []byte{}); got == nil || len(got) != 0 {
		t.Errorf("an empty new file: got %#v, want empty content", got)
	}
}

// TestPlanHoldsDiskBytesOfUnchangedJob: a converge of an installed job
// keeps the bytes observed on disk in its intent (MakePlan's result is
// unchanged: nothing to write).
func TestPlanHoldsDiskBytesOfUnchangedJob(t *testing.T) {
	j := job(idA)
	obs := installed(t, j)
	in, kept, err := jobIntent(testLayout, j, obs)
	if err != nil || kept {
		t.Fatalf("jobIntent: kept %v, %v", kept, err)
	}
	for _, ext := range []string{extTimer, extService, extSpec} {
		disk := obs.Disk[j.UnitName()].Files[ext]
		if got := in.files[ext]; len(got) == 0 || &got[0] != &disk[0] {
			t.Errorf("%s: the intent holds a second copy of the file on disk", ext)
		}
	}
	if steps := writeSteps(testLayout, in, obs); len(steps) != 0 {
		t.Errorf("unchanged job: %d write steps", len(steps))
	}
}
