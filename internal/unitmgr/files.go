package unitmgr

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/hostcron/hostcron/internal/atomicfile"
)

// writeIfChanged writes content to path atomically unless the file already holds exactly that content. It reports
// whether it wrote.
func writeIfChanged(path string, content []byte, mode os.FileMode) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, content) {
		return false, nil
	}
	if err := atomicfile.Write(path, content, mode); err != nil {
		return false, err
	}
	return true, nil
}

// ensureLockDir creates dir (mode 0700) owned by the tenant's user and
// group. The parent belongs to the tenant, who could plant a symlink there:
// the directory is opened without following links and chowned through its
// file descriptor, so root never changes anything outside it.
func ensureLockDir(dir, userName, groupName string) error {
	uid, gid, err := lookupIDs(userName, groupName)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create lock dir: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open lock dir %s (a symlink is refused): %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return fmt.Errorf("chown lock dir %s: %w", dir, err)
	}
	if err := unix.Fchmod(fd, 0o700); err != nil {
		return fmt.Errorf("chmod lock dir %s: %w", dir, err)
	}
	return nil
}

func lookupIDs(userName, groupName string) (int, int, error) {
	u, err := user.Lookup(userName)
	if err != nil {
		return 0, 0, fmt.Errorf("tenant user %q on this node: %w", userName, err)
	}
	g, err := user.LookupGroup(groupName)
	if err != nil {
		return 0, 0, fmt.Errorf("tenant group %q on this node: %w", groupName, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return 0, 0, fmt.Errorf("uid of %q: %w", userName, err)
	}
	gid, err := strconv.Atoi(g.Gid)
	if err != nil {
		return 0, 0, fmt.Errorf("gid of %q: %w", groupName, err)
	}
	return uid, gid, nil
}
