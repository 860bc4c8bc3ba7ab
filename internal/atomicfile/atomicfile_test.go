package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestWriteReplacesAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	for _, content := range []string{"one\n", "two\n"} {
		if err := Write(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(p); string(b) != content {
			t.Errorf("content %q, want %q", b, content)
		}
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d entries left in the directory, want 1", len(entries))
	}
}

func TestWriteDoesNotFollowASymlink(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	target := filepath.Join(elsewhere, "victim")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "f")
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("the symlink's target was written: %q", b)
	}
	if fi, _ := os.Lstat(p); fi.Mode()&os.ModeSymlink != 0 {
		t.Error("path is still the symlink")
	}
}

// batchOf adds files named by contents' keys to a new batch in dir.
func batchOf(t *testing.T, dir string, contents map[string]string) (*Batch, map[string]int) {
	t.Helper()
	b := &Batch{}
	idx := map[string]int{}
	for name, c := range contents {
		i, err := b.Add(filepath.Join(dir, name), []byte(c), 0o644)
		if err != nil {
			t.Fatal(err)
		}
		idx[name] = i
	}
	return b, idx
}

func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

func TestBatchReplacesAllAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("old a"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, idx := batchOf(t, dir, map[string]string{"a": "new a", "b": "new b"})
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if err := b.Rename(idx[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.SyncDirs(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if got := files(t, dir); len(got) != 2 || got["a"] != "new a" || got["b"] != "new b" {
		t.Errorf("directory holds %v", got)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "b")); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
}

// TestBatchSyncsBeforeAnyRename is the power-loss argument: at the one
// sync, every file is written in full under its temporary name and no
// path has changed yet; no rename is possible before it.
func TestBatchSyncsBeforeAnyRename(t *testing.T) {
	useSyncfs(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("old a"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, idx := batchOf(t, dir, map[string]string{"a": "new a", "b": "new b"})
	defer b.Close()
	if err := b.Rename(idx["a"]); err == nil {
		t.Fatal("a rename before the sync was allowed")
	}
	syncs := 0
	defer func(orig func(*os.File) error) { syncfs = orig }(syncfs)
	syncfs = func(d *os.File) error {
		syncs++
		got := files(t, dir)
		if got["a"] != "old a" || got["b"] != "" {
			t.Errorf("at the sync the paths hold %v, want them untouched", got)
		}
		temps := 0
		for name, c := range got {
			if strings.HasPrefix(name, TempPrefix) {
				temps++
				if c != "new a" && c != "new b" {
					t.Errorf("temporary file %s holds %q at the sync", name, c)
				}
			}
		}
		if temps != 2 {
			t.Errorf("%d temporary files at the sync, want 2", temps)
		}
		return nil
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if syncs != 1 {
		t.Errorf("%d syncs for one filesystem, want 1", syncs)
	}
	if _, err := b.Add(filepath.Join(dir, "c"), nil, 0o600); err == nil {
		t.Error("a file added after the sync was accepted")
	}
}

// TestBatchSyncFailurePublishesNothing: a failed sync (a writeback error)
// leaves every path as it was and removes the temporary files.
func TestBatchSyncFailurePublishesNothing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("old a"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer func(orig func(*os.File) error) { syncfs = orig }(syncfs)
	syncfs = func(*os.File) error { return syscall.EIO }
	useSyncfs(t)
	b, idx := batchOf(t, dir, map[string]string{"a": "new a"})
	if err := b.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("sync: %v, want EIO", err)
	}
	if err := b.Rename(idx["a"]); err == nil {
		t.Error("a rename after a failed sync was allowed")
	}
	b.Close()
	if got := files(t, dir); len(got) != 1 || got["a"] != "old a" {
		t.Errorf("directory holds %v, want only the old a", got)
	}
}

// TestBatchKilledHalfwayLeavesWholeFiles: a process killed after some
// renames (no Close) leaves each path old or new in full, and the rest
// as TempPrefix leftovers.
func TestBatchKilledHalfwayLeavesWholeFiles(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("old "+n), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b, idx := batchOf(t, dir, map[string]string{"a": "new a", "b": "new b"})
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := b.Rename(idx["a"]); err != nil {
		t.Fatal(err)
	}
	// killed here: no further rename, no Close
	got := files(t, dir)
	if got["a"] != "new a" || got["b"] != "old b" {
		t.Errorf("paths hold a=%q b=%q, want the new a and the old b", got["a"], got["b"])
	}
	for name, c := range got {
		if name != "a" && name != "b" && (!strings.HasPrefix(name, TempPrefix+"b-") || c != "new b") {
			t.Errorf("unexpected leftover %s = %q", name, c)
		}
	}
	if len(got) != 3 {
		t.Errorf("%d entries, want a, b and b's temporary file", len(got))
	}
}

func TestBatchDoesNotFollowASymlink(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	target := filepath.Join(elsewhere, "victim")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "f")
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
	b, idx := batchOf(t, dir, map[string]string{"f": "new"})
	defer b.Close()
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := b.Rename(idx["f"]); err != nil {
		t.Fatal(err)
	}
	if c, _ := os.ReadFile(target); string(c) != "keep" {
		t.Errorf("the symlink's target was written: %q", c)
	}
	if fi, _ := os.Lstat(p); fi.Mode()&os.ModeSymlink != 0 {
		t.Error("path is still the symlink")
	}
}

// useSyncfs makes every file of a batch wait for Sync's syncfs (as in a
// batch past syncfsFrom files), for the test's duration.
func useSyncfs(t *testing.T) {
	t.Helper()
	if !syncfsReportsErrors {
		t.Skip("this kernel's syncfs does not report writeback errors: batches fsync every file")
	}
	orig := syncfsFrom
	syncfsFrom = 0
	t.Cleanup(func() { syncfsFrom = orig })
}

// TestSmallBatchDoesNotSyncTheFilesystem: a batch of fewer than
// syncfsFrom files fsyncs each file as it is added and never syncfs's the
// filesystem, whose other dirty data (a tenant's) it would wait for.
func TestSmallBatchDoesNotSyncTheFilesystem(t *testing.T) {
	dir := t.TempDir()
	defer func(orig func(*os.File) error) { syncfs = orig }(syncfs)
	syncs := 0
	syncfs = func(*os.File) error { syncs++; return nil }
	b, idx := batchOf(t, dir, map[string]string{"a": "new a", "b": "new b"})
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if syncs != 0 {
		t.Errorf("%d syncfs calls for a batch of 2 files, want 0", syncs)
	}
	if err := b.Rename(idx["a"]); err != nil {
		t.Errorf("rename after Sync: %v", err)
	}
	b.Close()
}

// bothRenames runs f with renameat2's RENAME_NOREPLACE, then with the
// link fallback of a filesystem without it.
func bothRenames(t *testing.T, f func(t *testing.T)) {
	t.Run("renameat2", f)
	t.Run("link", func(t *testing.T) {
		orig := renameat2
		renameat2 = func(int, string, int, string, uint) error { return unix.EINVAL }
		t.Cleanup(func() { renameat2 = orig })
		f(t)
	})
}

// TestRenameNoReplaceNeverReplaces: a name taken stays as it was and the
// file to move stays where it was, with renameat2 and with the link
// fallback; a free name is taken and the old one is gone.
func TestRenameNoReplaceNeverReplaces(t *testing.T) {
	bothRenames(t, func(t *testing.T) {
		dir := t.TempDir()
		from, taken, free := filepath.Join(dir, "from"), filepath.Join(dir, "taken"), filepath.Join(dir, "free")
		for p, c := range map[string]string{from: "new", taken: "old"} {
			if err := os.WriteFile(p, []byte(c), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := RenameNoReplace(from, taken); !errors.Is(err, fs.ErrExist) {
			t.Errorf("onto a taken name: %v, want ErrExist", err)
		}
		if got := files(t, dir); len(got) != 2 || got["from"] != "new" || got["taken"] != "old" {
			t.Errorf("after the refused rename the directory holds %v", got)
		}
		if err := RenameNoReplace(from, free); err != nil {
			t.Fatal(err)
		}
		if got := files(t, dir); len(got) != 2 || got["free"] != "new" || got["taken"] != "old" {
			t.Errorf("after the rename the directory holds %v", got)
		}
	})
}

// TestRenameNoReplaceRace: writers racing for one name each move their
// own file there: exactly one gets it, every other file stays where it was.
func TestRenameNoReplaceRace(t *testing.T) {
	bothRenames(t, func(t *testing.T) {
		dir := t.TempDir()
		const writers = 8
		var wg sync.WaitGroup
		var won atomic.Int32
		for i := range writers {
			tmp, err := WriteTemp(filepath.Join(dir, "target"), []byte(strconv.Itoa(i)), 0o600)
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				switch err := RenameNoReplace(tmp, filepath.Join(dir, "target")); {
				case err == nil:
					won.Add(1)
				case !errors.Is(err, fs.ErrExist):
					t.Error(err)
				}
			})
		}
		wg.Wait()
		got := files(t, dir)
		if won.Load() != 1 || len(got) != writers || got["target"] == "" {
			t.Errorf("%d writers got the name; the directory holds %v, want the target and %d temporary files", won.Load(), got, writers-1)
		}
	})
}

// A temporary file a cleaner of leftovers removed before its move (one
// misled by a clock stepped forward) is written again: the file lands
// whole and nothing is left beside it. A move that fails for another
// reason is not retried, and its temporary file goes.
func TestWriteAndMoveWritesAVanishedTempAgain(t *testing.T) {
	for _, c := range []struct {
		name     string
		vanishes int // how many temporary files the cleaner takes
		wantErr  bool
	}{
		{"none", 0, false},
		{"the first", 1, false},
		{"all but the last", tempAttempts - 1, false},
		{"every one", tempAttempts, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "report.json")
			taken := 0
			beforeMove = func(tmp string) {
				if taken < c.vanishes {
					taken++
					os.Remove(tmp)
				}
			}
			t.Cleanup(func() { beforeMove = func(string) {} })
			err := Write(path, []byte("whole"), 0o600)
			if (err != nil) != c.wantErr || c.wantErr && !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Write: %v, want an error %v (not exist)", err, c.wantErr)
			}
			b, rerr := os.ReadFile(path)
			if c.wantErr != errors.Is(rerr, fs.ErrNotExist) || !c.wantErr && string(b) != "whole" {
				t.Fatalf("file %q (%v) after Write: %v", b, rerr, err)
			}
			wantLeft := 1 // the file, no temporary one beside it
			if c.wantErr {
				wantLeft = 0
			}
			if left := listDir(t, dir); len(left) != wantLeft {
				t.Fatalf("left in the directory: %v", left)
			}
		})
	}
	t.Run("another error", func(t *testing.T) {
		dir := t.TempDir()
		moves := 0
		err := WriteAndMove(filepath.Join(dir, "x"), []byte("x"), 0o600, func(string) error { moves++; return unix.EXDEV })
		if !errors.Is(err, unix.EXDEV) || moves != 1 {
			t.Fatalf("WriteAndMove: %v after %d moves, want EXDEV after one", err, moves)
		}
		if left := listDir(t, dir); len(left) != 0 {
			t.Fatalf("left in the directory: %v", left)
		}
	})
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
