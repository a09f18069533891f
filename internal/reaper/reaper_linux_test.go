package reaper_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/internal/reaper"
)

// A grandchild that calls setsid, ignores SIGTERM and outlives its parent
// is what escaped a run before: adopted, it stays a descendant, and
// KillAll kills it, with the children it started.
func TestKillAllKillsAGrandchildThatEscapedToASessionOfItsOwn(t *testing.T) {
	if err := reaper.Adopt(); err != nil {
		t.Fatal(err)
	}
	// The child starts the grandchild in a new session, prints its pid and
	// exits; the grandchild ignores SIGTERM and starts a child of its own.
	cmd := exec.CommandContext(t.Context(), "sh", "-c", `setsid sh -c 'trap "" TERM; sleep 300 & sleep 300' </dev/null >/dev/null 2>&1 & echo $!`)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	grandchild, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(grandchild, syscall.SIGKILL) })

	var found []int
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.After(10 * time.Second); ; {
		if found, err = reaper.Descendants(); err != nil {
			t.Fatal(err)
		}
		// The grandchild and its sleeping child, once both are there.
		if slices.Contains(found, grandchild) && len(found) >= 2 {
			break
		}
		select {
		case <-deadline:
		case <-tick.C:
			continue
		}
		break
	}
	if !slices.Contains(found, grandchild) || len(found) < 2 {
		t.Fatalf("descendants %v; want the grandchild %d, reparented to the test, and its child", found, grandchild)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	killed, err := reaper.KillAll(ctx)
	if err != nil {
		t.Fatalf("kill all: %v", err)
	}
	if killed < 2 {
		t.Errorf("killed %d processes; want the grandchild and its child at least", killed)
	}
	if live(grandchild) {
		t.Errorf("the grandchild %d is still running", grandchild)
	}
	if left, _ := reaper.Descendants(); len(left) > 0 {
		t.Errorf("descendants left after KillAll: %v", left)
	}
}

// live reports whether pid runs, a zombie not counted.
func live(pid int) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if state, ok := strings.CutPrefix(s.Text(), "State:"); ok {
			state = strings.TrimSpace(state)
			return !strings.HasPrefix(state, "Z") && !strings.HasPrefix(state, "X")
		}
	}
	return false
}
