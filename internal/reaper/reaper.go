package reaper

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// Descendants returns the live descendants of the calling process, parents
// before their children.
func Descendants() ([]int, error) {
	return descendantsOf(os.Getpid())
}

func descendantsOf(root int) ([]int, error) {
	ppid, err := parents()
	if err != nil {
		return nil, err
	}
	children := make(map[int][]int)
	for pid, parent := range ppid {
		children[parent] = append(children[parent], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		kids := children[p]
		slices.Sort(kids)
		out = append(out, kids...)
		queue = append(queue, kids...)
	}
	return out, nil
}

// sweepPause is the pause between two sweeps of KillAll: a descendant
// killed in one may have forked just before.
const sweepPause = 20 * time.Millisecond

// KillAll sends SIGKILL to every live descendant of the calling process,
// sweep after sweep, until none is left or ctx ends. It returns how many
// processes it killed, and the error that stopped it from finding them
// or those still alive when ctx ended.
//
// SIGKILL, not SIGTERM: it runs when the run is over or abandoned, and
// whatever is left then ignored, or never got, the way out it was given.
func KillAll(ctx context.Context) (killed int, err error) {
	seen := make(map[int]bool)
	tick := time.NewTicker(sweepPause)
	defer tick.Stop()
	for {
		pids, err := Descendants()
		if err != nil {
			return killed, err
		}
		if len(pids) == 0 {
			return killed, nil
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil && !seen[pid] {
				seen[pid] = true
				killed++
			}
		}
		select {
		case <-ctx.Done():
			left, _ := Descendants()
			if len(left) == 0 {
				return killed, nil
			}
			return killed, errors.Join(context.Cause(ctx), &LeftError{PIDs: left})
		case <-tick.C:
		}
	}
}

// LeftError names the descendants KillAll could not kill in time.
type LeftError struct{ PIDs []int }

func (e *LeftError) Error() string {
	s := "processes still alive:"
	for _, pid := range e.PIDs {
		s += " " + strconv.Itoa(pid)
	}
	return s
}
