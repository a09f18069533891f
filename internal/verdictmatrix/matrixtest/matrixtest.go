// Package matrixtest runs the verdict matrix: it certifies built-in
// adapters with the real harmless command, each on a throwaway cluster of
// its own, and compares every verdict with the adapter's entry in the
// registry (verdictmatrix.Compare).
//
// The matrix is proved by the tests of the packages that hold the
// adapters, one family each: internal/adapters/alternatives certifies the
// correct ones (the reference and the alternatives), internal/adapters/broken
// the broken ones ([Entries] splits the registry by builtin.Entry.Broken,
// so no entry falls between them). go test ./... starts a package's tests
// in the order of its import path, two packages at a time on two cores: a
// matrix that lived in a package sorted last ran alone for its last two
// minutes, where two halves in packages sorted earlier run beside the
// others. internal/verdictmatrix keeps the formation's matrix, which
// uses [Build] and [Certify] too.
package matrixtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/adapters/alternatives/slow"
	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/speclabel"
	"github.com/harmless-dev/harmless/internal/verdictmatrix"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// concurrency is how many certifications a family runs at once. Most of a
// certification is waiting (on the server, on sleeps the fixtures plan,
// on crashes and restarts, on alt-slow's delays), so the two families
// together run more than the machine has cores.
const concurrency = 3

// limit bounds one certification: far above what one takes, so that a
// harness that hangs fails the test instead of hanging it.
const limit = 8 * time.Minute

// Exit codes of harmless certify.
const (
	ExitCertified    = 0
	ExitNotCertified = 1
	ExitPartial      = 3
)

// adaptersFlag, when set, names the only adapters the matrix certifies,
// comma-separated: a change to a few entries of the registry is proved in
// minutes, before the whole matrix runs. Each family certifies those of
// its own.
var adaptersFlag = flag.String("matrix-adapters", "", "certify only these built-in adapters in the verdict matrix, comma-separated (all of the family when empty)")

// Entries returns the registry's entries of a family: the broken ones
// when broken is set, else the correct ones; only those -matrix-adapters
// names, when it names any (a name that is no built-in adapter fails the
// test).
func Entries(t *testing.T, broken bool) []builtin.Entry {
	t.Helper()
	var rows []builtin.Entry
	if *adaptersFlag == "" {
		rows = builtin.Entries()
	} else {
		for name := range strings.SplitSeq(*adaptersFlag, ",") {
			e, err := builtin.EntryOf(strings.TrimSpace(name))
			if err != nil {
				t.Fatalf("-matrix-adapters: %v", err)
			}
			rows = append(rows, e)
		}
	}
	return slices.DeleteFunc(rows, func(e builtin.Entry) bool { return e.Broken() != broken })
}

// Run is one certification and what came of it.
type Run struct {
	Code           int
	Stdout, Stderr string
	Cert           *certificate.Certificate
	Err            error
	Took           time.Duration
}

// Prove certifies each of rows with the real command on a throwaway
// cluster of its own and compares each verdict with the registry, rule by
// rule, in a subtest named for the adapter: correct implementations must
// be certified, broken ones must fail exactly the rules their entry
// names. Any difference fails the subtest, naming the rule.
func Prove(t *testing.T, rows []builtin.Entry) {
	t.Helper()
	if len(rows) == 0 {
		t.Skip("-matrix-adapters names no adapter of this family")
	}
	bin := Build(t)
	// One certification per adapter, and one per fixture for the slow
	// adapter, whose whole run would take longer than all the others.
	type job struct {
		row    int
		filter string // a label filter, or "" for every rule
	}
	var jobs []job
	for i, row := range rows {
		if row.Adapter.Name != slow.Name {
			jobs = append(jobs, job{row: i})
			continue
		}
		for _, f := range fixtures.Catalog() {
			jobs = append(jobs, job{row: i, filter: speclabel.Fixture(f.ID)})
		}
	}
	// The slow adapter's jobs first, so that none of them runs alone at the
	// end.
	slices.SortStableFunc(jobs, func(a, b job) int {
		return boolInt(rows[b.row].Adapter.Name == slow.Name) - boolInt(rows[a.row].Adapter.Name == slow.Name)
	})
	runs := make([]Run, len(jobs))
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			args := []string{"--provision", "cluster"}
			if j.filter != "" {
				args = append(args, "--label-filter", j.filter)
			}
			runs[i] = Certify(t, bin, rows[j.row].Adapter.Name, args...)
		})
	}
	wg.Wait()
	for i, row := range rows {
		t.Run(row.Adapter.Name, func(t *testing.T) {
			var mine []Run
			for k, j := range jobs {
				if j.row == i {
					mine = append(mine, runs[k])
				}
			}
			var took time.Duration
			for _, r := range mine {
				took += r.Took
				if r.Cert == nil {
					t.Fatalf("no certificate (exit code %d, %v)\nstdout:\n%s\nstderr:\n%s", r.Code, r.Err, r.Stdout, r.Stderr)
				}
				if r.Cert.DatabaseKind != "cluster" {
					t.Errorf("certified on a %s server; want a throwaway cluster", r.Cert.DatabaseKind)
				}
			}
			cert := Merge(mine)
			t.Logf("certified in %s, in %d run(s); the broker's longest wait %.2fs of its patience of %gs, given up %d times",
				took.Round(100*time.Millisecond), len(mine), cert.Redelivery.LongestWait, cert.Redelivery.Patience, cert.Redelivery.GaveUp)
			for _, diff := range verdictmatrix.Compare(cert, row) {
				t.Error(diff)
			}
			if len(mine) == 1 {
				want := map[certificate.Status]int{certificate.StatusCertified: ExitCertified, certificate.StatusPartial: ExitPartial, certificate.StatusNotCertified: ExitNotCertified}[cert.Status]
				if mine[0].Code != want {
					t.Errorf("exit code %d with status %s; want %d", mine[0].Code, cert.Status, want)
				}
			}
			if cert.Faults["server:crash"] == 0 {
				t.Error("the server never crashed: crash-recovery did not run")
			}
			if t.Failed() {
				for _, r := range mine {
					t.Logf("stdout:\n%s", r.Stdout)
				}
			}
		})
	}
}

// Merge joins the certificates of runs of one adapter, each of which ran
// some of the rules, into one that holds each rule's verdict from the run
// that ran it, and decides its status from them.
func Merge(runs []Run) certificate.Certificate {
	cert := *runs[0].Cert
	if len(runs) == 1 {
		return cert
	}
	cert.Rules = slices.Clone(cert.Rules)
	cert.Faults = map[string]int64{}
	cert.Redelivery.LongestWait, cert.Redelivery.GaveUp = 0, 0
	for _, r := range runs {
		for kind, n := range r.Cert.Faults {
			cert.Faults[kind] += n
		}
		cert.Redelivery.LongestWait = max(cert.Redelivery.LongestWait, r.Cert.Redelivery.LongestWait)
		cert.Redelivery.GaveUp += r.Cert.Redelivery.GaveUp
		for i, rule := range r.Cert.Rules {
			if rule.Verdict != certificate.VerdictSkipped {
				cert.Rules[i] = rule
			}
		}
	}
	cert.Status = certificate.StatusOf(cert.Rules)
	cert.Certified = cert.Status == certificate.StatusCertified
	return cert
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Build builds the harmless command in the test's temporary directory and
// returns its path.
func Build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "harmless")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/harmless-dev/harmless/cmd/harmless").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// Certify certifies adapter with the command bin and its further args,
// and reads the certificate it wrote.
func Certify(t *testing.T, bin, adapter string, more ...string) Run {
	path := filepath.Join(t.TempDir(), "certificate.json")
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	args := append([]string{"certify", "--adapter", adapter, "--json", path}, more...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := Run{Stdout: stdout.String(), Stderr: stderr.String(), Took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.Code = exit.ExitCode()
	default:
		r.Err = err
		return r
	}
	data, err := os.ReadFile(path)
	if err != nil {
		r.Err = err
		return r
	}
	var cert certificate.Certificate
	if err := json.Unmarshal(data, &cert); err != nil {
		r.Err = err
		return r
	}
	r.Cert = &cert
	return r
}
