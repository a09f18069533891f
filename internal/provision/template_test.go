package provision

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// privateTmpdir makes a directory the server's user can enter, sets TMPDIR
// to it for the test, and returns it with the environment that says so: the
// test's clusters and templates are made there, away from other tests'.
func privateTmpdir(t *testing.T) (string, func(string) (string, bool)) {
	t.Helper()
	dir, err := os.MkdirTemp("", "harmless-provision-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", dir)
	return dir, env("TMPDIR", dir)
}

// TestClustersFromATemplate: the first cluster made from a set of binaries
// leaves a template beside it, private to the server's user; the next is
// made from it, and takes its own password and no other.
func TestClustersFromATemplate(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	dir, lookup := privateTmpdir(t)
	open := func() (*Server, string) {
		var lines []string
		srv, err := Open(ctx, Options{Only: KindCluster, LookupEnv: lookup, Logf: func(f string, a ...any) {
			lines = append(lines, fmt.Sprintf(f, a...))
		}})
		if err != nil {
			t.Fatalf("Open cluster: %v", err)
		}
		closeServer(t, srv)
		return srv, strings.Join(lines, "\n")
	}
	first, log := open()
	if !strings.Contains(log, "made from a template") {
		t.Fatalf("the first cluster was not made from a template:\n%s", log)
	}
	key, err := templateKey(first.b.(*cluster).bin)
	if err != nil {
		t.Fatal(err)
	}
	tpl := filepath.Join(dir, templatePrefix+key)
	fi, err := os.Stat(tpl)
	if err != nil {
		t.Fatalf("no template left beside the cluster: %v", err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("template %s has mode %v, want 0700", tpl, fi.Mode().Perm())
	}
	second, log := open()
	if !strings.Contains(log, "made from a template") {
		t.Fatalf("the second cluster was not made from the template:\n%s", log)
	}
	// Each takes its own password, and not the other's.
	for _, srv := range []*Server{first, second} {
		if err := pingOnce(ctx, srv.DSN()); err != nil {
			t.Errorf("%s: %v", srv, err)
		}
	}
	other := strings.Replace(second.DSN(), second.b.(*cluster).password, first.b.(*cluster).password, 1)
	if err := pingOnce(ctx, other); err == nil {
		t.Error("the second cluster takes the first one's password")
	}
}

// TestABrokenTemplateFallsBackToInitdb: a template that cannot be used
// makes the cluster by initdb, which works as before.
func TestABrokenTemplateFallsBackToInitdb(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	dir, lookup := privateTmpdir(t)
	bin, err := findBinaries(settings{path: os.Getenv("PATH")})
	if err != nil {
		t.Skipf("no server binaries: %v", err)
	}
	key, err := templateKey(bin)
	if err != nil {
		t.Skipf("no postgres binary beside initdb: %v", err)
	}
	// A template whose data directory is empty.
	if err := os.MkdirAll(filepath.Join(dir, templatePrefix+key, clusterDataDir), 0o755); err != nil {
		t.Fatal(err)
	}
	var lines []string
	srv, err := Open(ctx, Options{Only: KindCluster, LookupEnv: lookup, Logf: func(f string, a ...any) {
		lines = append(lines, fmt.Sprintf(f, a...))
	}})
	if err != nil {
		t.Fatalf("Open cluster: %v", err)
	}
	closeServer(t, srv)
	log := strings.Join(lines, "\n")
	if !strings.Contains(log, "running initdb") || !strings.Contains(log, "made from initdb") {
		t.Errorf("want the cluster made by initdb, saying why:\n%s", log)
	}
	if err := pingOnce(ctx, srv.DSN()); err != nil {
		t.Errorf("%s: %v", srv, err)
	}
}

// TestLeftoverTemplatesAreRemoved: a run removes the half-made templates of
// dead runs and the templates of other binaries, and keeps its own.
func TestLeftoverTemplatesAreRemoved(t *testing.T) {
	dir, _ := privateTmpdir(t)
	bin, err := findBinaries(settings{path: os.Getenv("PATH")})
	if err != nil {
		t.Skipf("no server binaries: %v", err)
	}
	key, err := templateKey(bin)
	if err != nil {
		t.Skipf("no postgres binary beside initdb: %v", err)
	}
	mine := filepath.Join(dir, templatePrefix+key)
	stale := filepath.Join(dir, templatePrefix+"0123456789abcdef")
	dead := filepath.Join(dir, fmt.Sprintf("%s%s.tmp-%d-1", templatePrefix, key, deadPID(t)))
	live := filepath.Join(dir, fmt.Sprintf("%s%s.tmp-%d-1", templatePrefix, key, os.Getpid()))
	// Named like templates, but not ones: not a key, or no data directory.
	notes := filepath.Join(dir, templatePrefix+"notes")
	empty := filepath.Join(dir, templatePrefix+"fedcba9876543210")
	for _, d := range []string{mine, stale, dead, live, notes} {
		if err := os.MkdirAll(filepath.Join(d, clusterDataDir), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	cleanLeftoverTemplates(bin)
	for d, kept := range map[string]bool{mine: true, stale: false, dead: false, live: true, notes: true, empty: true} {
		if _, err := os.Stat(d); (err == nil) != kept {
			t.Errorf("%s: kept %t, want %t", filepath.Base(d), err == nil, kept)
		}
	}
}
