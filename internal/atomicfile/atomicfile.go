// Package atomicfile replaces a file's content all at once and durably:
// readers see the old content or the new one, never a part, and after a
// crash the new content is there if Write returned.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// TempPrefix starts the name of every temporary file Write creates
// (".tmp-<name>-<random>" beside the target): a crash between create and
// rename leaves one behind, and cleaners find them by this prefix.
const TempPrefix = ".tmp-"

// Write stores data at path with mode: a new temporary file in the same
// directory renamed over path (WriteAndMove), then an fsync of the
// directory.
func Write(path string, data []byte, mode os.FileMode) error {
	if err := WriteAndMove(path, data, mode, func(tmp string) error { return os.Rename(tmp, path) }); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil { // make the rename itself durable
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// tempAttempts is how many temporary files WriteAndMove writes for one
// file when each vanishes before it is moved into place.
const tempAttempts = 3

// beforeMove runs between a temporary file's write and its move; tests
// set it to remove the file, as a cleaner of leftovers would.
var beforeMove = func(tmp string) {}

// WriteAndMove writes data with mode to a new temporary file beside path
// (WriteTemp) and hands its name to move, which puts it in place (a
// rename over path, a RenameNoReplace). What move leaves of it is
// removed. A temporary file that vanished before move took it (move
// fails with fs.ErrNotExist: a cleaner of leftovers misled by a clock
// stepped forward, as outcome's removeStaleTemps can be) is written
// again, up to tempAttempts files in all.
func WriteAndMove(path string, data []byte, mode os.FileMode, move func(tmp string) error) error {
	var err error
	for range tempAttempts {
		var tmp string
		if tmp, err = WriteTemp(path, data, mode); err != nil {
			return err
		}
		beforeMove(tmp)
		err = move(tmp)
		os.Remove(tmp) // nothing left after a move
		if err == nil {
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	return fmt.Errorf("write %s: %w", path, err)
}

// WriteTemp writes data with mode to a new temporary file beside path
// (TempPrefix, created exclusively, so a planted symlink is never
// followed), fsyncs it and returns its path, for the caller to rename
// into place (WriteAndMove) or remove. path is not touched.
func WriteTemp(path string, data []byte, mode os.FileMode) (string, error) {
	return writeTemp(path, data, mode, true)
}

// writeTemp is WriteTemp, with the fsync left to the caller when sync is
// false (Batch: one syncfs for many files).
func writeTemp(path string, data []byte, mode os.FileMode, sync bool) (string, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), TempPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil && sync {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return tmp.Name(), nil
}

// renameat2 is unix.Renameat2; tests replace it to take the fallback a
// filesystem without RENAME_NOREPLACE makes RenameNoReplace take.
var renameat2 = unix.Renameat2

// RenameNoReplace gives the file at from the name to, as os.Rename does,
// but never in place of a file already named to: it then fails with an
// error errors.Is(err, fs.ErrExist) matches, and from stays as it was.
// Of two callers racing for one name, one gets it and the other that
// error. The new name is durable when it returns (fsync of its directory).
//
// A filesystem or kernel without renameat2's RENAME_NOREPLACE (EINVAL,
// ENOSYS) gets a link to the new name (link(2) never replaces either), a
// sync, then the old name's removal: a crash or an error between the two
// leaves the file under both names, never under none.
func RenameNoReplace(from, to string) error {
	err := renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	switch {
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS):
		if err := os.Link(from, to); err != nil {
			return err // an *os.LinkError: EEXIST matches fs.ErrExist
		}
		if err := SyncDir(filepath.Dir(to)); err != nil {
			return err
		}
		if err := os.Remove(from); err != nil {
			return fmt.Errorf("rename %s %s: linked, not removed: %w", from, to, err)
		}
		return nil
	case err != nil:
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return SyncDir(filepath.Dir(to))
}

// Batch replaces many files all at once as Write does each, with one
// sync of each filesystem instead of two fsyncs per file (issue 16: at
// 10,000 jobs those were 60,000 journal commits). Use: Add every file
// (written under a temporary name, not synced), Sync, then Rename each
// (in the order the caller needs), SyncDirs, Close.
//
// Why a crash at any point leaves every path with its old content or its
// whole new content, never a part: a path changes only by a rename, and
// Rename refuses to run before Sync has made every added file's data and
// inode durable (syncfs(2) of each filesystem involved: all dirty data and
// metadata, then one journal commit). A power loss before Sync returned
// leaves temporary files of any length under names nobody reads (the
// TempPrefix leftovers a cleaner removes) and every path untouched; one
// after it leaves each renamed path pointing at a complete file, and each
// rename that did not reach the disk leaves the old file. SyncDirs makes
// the renames themselves durable (one fsync per directory).
type Batch struct {
	files  []batchFile
	fs     map[uint64]*os.File // per filesystem (st_dev): a directory opened before its first file was written
	dirs   map[string]bool     // directories a rename changed
	synced bool
	// needSyncfs: a file was added without its own fsync (the batch had
	// syncfsFrom files already), so Sync must syncfs.
	needSyncfs bool
}

// syncfsFrom is how many files a batch fsyncs one by one before it leaves
// the rest to one syncfs(2) in Sync. syncfs writes out every dirty page of
// the filesystem, a tenant's gigabytes included (the review measured 0.14
// s against 5 ms for one small file's fsync after 300 MB of unsynced
// writes), so a small apply (a job edit) pays fsyncs of its own files
// only, and a converge of thousands one syncfs instead of thousands of
// fsyncs.
var syncfsFrom = 64 // a variable: tests set it to exercise syncfs

// syncfsReportsErrors: syncfs(2) reports writeback errors from Linux 5.8
// on; before that it returns 0 after an EIO, and a batch fsyncs every
// file itself.
var syncfsReportsErrors = kernelAtLeast(5, 8)

// kernelAtLeast reports whether the running kernel's release is at
// least major.minor (false if it cannot be read).
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}

type batchFile struct {
	path, tmp string
	renamed   bool
}

// Add writes data with mode to a new temporary file beside path (created
// exclusively, so a planted symlink is never followed) and returns its
// index for Rename. Nothing is synced yet and path is not touched.
func (b *Batch) Add(path string, data []byte, mode os.FileMode) (int, error) {
	if b.synced {
		return 0, fmt.Errorf("write %s: batch already synced", path)
	}
	dir := filepath.Dir(path)
	if err := b.watchFS(dir); err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	// The first syncfsFrom files (all, where syncfs reports no errors)
	// are fsynced now, and Sync need not syncfs for them.
	sync := len(b.files) < syncfsFrom || !syncfsReportsErrors
	tmp, err := writeTemp(path, data, mode, sync)
	if err != nil {
		return 0, err
	}
	b.needSyncfs = b.needSyncfs || !sync
	b.files = append(b.files, batchFile{path: path, tmp: tmp})
	return len(b.files) - 1, nil
}

// watchFS opens dir once per filesystem before anything is written there:
// syncfs(2) reports a writeback error (an EIO, a full thin volume) only to
// a descriptor opened before the error happened (Linux 5.8 and later).
func (b *Batch) watchFS(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return err
	}
	if _, ok := b.fs[st.Dev]; ok {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if b.fs == nil {
		b.fs = map[uint64]*os.File{}
	}
	b.fs[st.Dev] = d
	return nil
}

// syncfs is unix.Syncfs on d; tests replace it to fail or to see what
// is on disk at the moment of the sync.
var syncfs = func(d *os.File) error { return unix.Syncfs(int(d.Fd())) }

// Sync makes every added file durable: the first syncfsFrom were fsynced
// as they were added, the rest by one syncfs(2) per filesystem. After an
// error no file may be renamed (Close removes them all).
func (b *Batch) Sync() error {
	if !b.needSyncfs {
		b.synced = true
		return nil
	}
	for _, d := range b.fs {
		if err := syncfs(d); err != nil {
			return fmt.Errorf("sync the filesystem of %s: %w", d.Name(), err)
		}
	}
	b.synced = true
	return nil
}

// Rename puts added file i in place of its path. It fails before a
// successful Sync: the rename would then publish a file whose content a
// power loss can still lose.
func (b *Batch) Rename(i int) error {
	f := &b.files[i]
	if !b.synced {
		return fmt.Errorf("write %s: not synced", f.path)
	}
	if err := os.Rename(f.tmp, f.path); err != nil {
		return fmt.Errorf("write %s: %w", f.path, err)
	}
	f.renamed = true
	if b.dirs == nil {
		b.dirs = map[string]bool{}
	}
	b.dirs[filepath.Dir(f.path)] = true
	return nil
}

// SyncDirs makes the renames done since the last SyncDirs durable: one
// fsync per directory.
func (b *Batch) SyncDirs() error {
	var errs []error
	for dir := range b.dirs {
		if err := SyncDir(dir); err != nil {
			errs = append(errs, err)
		}
	}
	b.dirs = nil
	return errors.Join(errs...)
}

// Close removes the temporary files that were not renamed and releases
// the batch.
func (b *Batch) Close() {
	for _, f := range b.files {
		if !f.renamed {
			os.Remove(f.tmp)
		}
	}
	for _, d := range b.fs {
		d.Close()
	}
	*b = Batch{}
}

// SyncDir fsyncs a directory, making the renames, creations and removals
// of names in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
