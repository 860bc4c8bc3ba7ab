// Package atomicfile replaces a file's content all at once and durably:
// readers see the old content or the new one, never a part, and after a
// crash the new content is there if Write returned.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// TempPrefix starts the name of every temporary file Write creates
// (".tmp-<name>-<random>" beside the target): a crash between create and
// rename leaves one behind, and cleaners find them by this prefix.
const TempPrefix = ".tmp-"

// Write stores data at path with mode: a new temporary file in the same
// directory (created exclusively, so a planted symlink is never
// followed), fsync, rename over path, fsync of the directory.
func Write(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, TempPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil { // make the rename itself durable
		_ = d.Sync()
		d.Close()
	}
	return nil
}
