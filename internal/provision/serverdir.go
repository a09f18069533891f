package provision

import (
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// Where throwaway servers live. A server's directory holds its data, and
// a certification creates and drops a schema per play: thousands of
// relation files made and unlinked in seconds. On a disk file system that
// is the largest part of the server's CPU time (ext4's inode allocation
// and block lookups: the reference's certify took 6.0 to 7.1 s on ext4
// and 5.0 to 5.3 s on tmpfs, its machine-wide CPU 6.5 s against 5.0 s,
// on the 2-core machine CI runs on). A throwaway server needs no disk:
// fsync is off already, and a crash harmless makes kills the server's
// processes, not the machine, so what a committed transaction wrote is
// in the page cache either way and the server recovers it from its WAL
// as it would from a disk. So a server's directory is made on a RAM-backed
// file system when the machine has one with room, and in os.TempDir
// otherwise, or when the user chose a directory with TMPDIR.
const (
	// memoryDir is the RAM-backed file system Linux mounts for POSIX
	// shared memory, writable by every user.
	memoryDir = "/dev/shm"
	// memoryRoom is the free space memoryDir must have: far more than a
	// server's directory takes (about 40 MB for a cluster, three times
	// that for a formation, plus what a run writes) so that a run never
	// fills the machine's memory.
	memoryRoom = 2 << 30
	// tmpfsMagic is statfs's f_type of a tmpfs.
	tmpfsMagic = 0x01021994
)

// serverParent returns the directory in which a throwaway server's
// directory is made: os.TempDir when TMPDIR is set (getenv reads it),
// else memoryDir when it is a tmpfs with memoryRoom free, else
// os.TempDir.
func serverParent(getenv func(string) string) string {
	if getenv("TMPDIR") == "" && roomyTmpfs(memoryDir) {
		return memoryDir
	}
	return os.TempDir()
}

// leftoverParents returns every directory a run may have made a server's
// directory in, for the leftovers of dead runs, whichever serverParent
// chose for them.
func leftoverParents() []string {
	dirs := []string{filepath.Clean(os.TempDir())}
	if fi, err := os.Stat(memoryDir); err == nil && fi.IsDir() && !slices.Contains(dirs, memoryDir) {
		dirs = append(dirs, memoryDir)
	}
	return dirs
}

// roomyTmpfs reports whether dir is a writable tmpfs with memoryRoom
// bytes free.
func roomyTmpfs(dir string) bool {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil || int64(fs.Type) != tmpfsMagic {
		return false
	}
	if unix.Access(dir, unix.W_OK) != nil {
		return false
	}
	return fs.Bavail*uint64(fs.Bsize) >= memoryRoom
}

// globLeftovers returns the entries named prefix* in every directory of
// leftoverParents.
func globLeftovers(prefix string) []string {
	var dirs []string
	for _, parent := range leftoverParents() {
		found, _ := filepath.Glob(filepath.Join(parent, prefix+"*"))
		dirs = append(dirs, found...)
	}
	return dirs
}
