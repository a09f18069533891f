package pgtest

import (
	"flag"
	"strconv"
	"testing"
)

// TestRaiseParallel: -test.parallel is raised where the tests' server will
// be one the binary starts, and left alone on a server named by a DSN.
func TestRaiseParallel(t *testing.T) {
	f := flag.Lookup("test.parallel")
	before := f.Value.String()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given {
		t.Skip("-test.parallel was given, which RaiseParallel never overrides")
	}
	t.Cleanup(func() { _ = flag.Set("test.parallel", before) })
	n, _ := strconv.Atoi(before)
	want := strconv.Itoa(n + 5)

	t.Setenv("HARMLESS_PROVISION", "")
	t.Setenv("HARMLESS_DSN", "postgres://nobody@nowhere.invalid/db")
	RaiseParallel(n + 5)
	if got := f.Value.String(); got != before {
		t.Errorf("on a server named by a DSN: -test.parallel %s, want %s as it was", got, before)
	}

	t.Setenv("HARMLESS_PROVISION", "cluster")
	RaiseParallel(n + 5)
	if got := f.Value.String(); got != want {
		t.Errorf("on a throwaway cluster: -test.parallel %s, want %s", got, want)
	}
}
