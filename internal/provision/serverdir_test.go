package provision

import (
	"os"
	"testing"
)

func TestServerParent(t *testing.T) {
	inMemory := roomyTmpfs(memoryDir)
	t.Logf("%s is a tmpfs with room: %t", memoryDir, inMemory)
	unset := func(string) string { return "" }
	want := os.TempDir()
	if inMemory {
		want = memoryDir
	}
	if got := serverParent(unset); got != want {
		t.Errorf("without TMPDIR: %s, want %s", got, want)
	}
	// TMPDIR is the user's choice, and wins over memory.
	chosen := t.TempDir()
	t.Setenv("TMPDIR", chosen)
	if got := serverParent(os.Getenv); got != chosen {
		t.Errorf("with TMPDIR=%s: %s, want it", chosen, got)
	}
	if roomyTmpfs(chosen) && !inMemory {
		t.Errorf("%s is taken for a roomy tmpfs, %s is not", chosen, memoryDir)
	}
	if roomyTmpfs("/nonexistent-harmless-dir") {
		t.Error("a directory that does not exist is taken for a roomy tmpfs")
	}
}

func TestLeftoverParentsHoldBothPlaces(t *testing.T) {
	parents := leftoverParents()
	for _, want := range []string{os.TempDir(), memoryDir} {
		if fi, err := os.Stat(want); err != nil || !fi.IsDir() {
			continue
		}
		found := false
		for _, p := range parents {
			found = found || p == want
		}
		if !found {
			t.Errorf("leftover parents %v miss %s", parents, want)
		}
	}
}
