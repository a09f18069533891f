package provision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// cleanLeftoverFormations removes the formation directories, in any of
// leftoverParents, whose owner is dead, killing their processes first:
// the pg_autoctl run processes recorded in the directory (if they are
// still the processes that started then), every process working in the
// directory or naming it, and the postmasters of its PGDATAs. Failures are logged, not returned:
// they must not keep this run from starting.
func cleanLeftoverFormations(ctx context.Context, st settings) {
	dirs := globLeftovers(haDirPrefix)
	for _, dir := range dirs {
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			continue
		}
		o, _, marked := dirOwner(dir, haDirPrefix)
		if !o.dead() {
			continue
		}
		if !marked {
			// As for clusters: only the empty directory of a run killed
			// before it wrote its owner file is harmless's for sure.
			if err := os.Remove(dir); err == nil {
				st.logf("removed empty leftover HA formation directory %s of dead process %d", dir, o.pid)
			} else if !errors.Is(err, fs.ErrNotExist) {
				st.logf("left %s in place: it has no owner file and is not empty, so it is not a formation of harmless's", dir)
			}
			continue
		}
		if err := removeFormationDir(ctx, dir); err != nil {
			st.logf("leftover HA formation of dead process %d: %v", o.pid, err)
			continue
		}
		st.logf("removed leftover HA formation %s of dead process %d", dir, o.pid)
	}
}

// removeFormationDir kills the processes of a formation directory whose
// owner is gone and removes it.
func removeFormationDir(ctx context.Context, dir string) error {
	as, err := clusterRunner()
	if err != nil {
		return err
	}
	for pid, start := range recordedRuns(dir) {
		if start != "" && procStart(pid) == start {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = signalIfSame(pid, start, syscall.SIGKILL)
		}
	}
	datas, _ := filepath.Glob(filepath.Join(dir, "*", "postmaster.pid"))
	for i, p := range datas {
		datas[i] = filepath.Dir(p)
	}
	if left := killAllIn(ctx, dir, as.serverUID(), datas, haKillTimeout); len(left) > 0 {
		return fmt.Errorf("processes %v of %s survive SIGKILL: left in place", left, dir)
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
