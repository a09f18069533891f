package verdictmatrix

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
	"github.com/harmless-dev/harmless/suite/certificate"
)

// concurrency is how many certifications run at once. Most of a
// certification is waiting (on the server, on sleeps the fixtures plan, on
// crashes and restarts, on alt-slow's delays), so more run at once than the
// machine has cores.
const concurrency = 4

// limit bounds one certification: far above what one takes, so that a
// harness that hangs fails this test instead of hanging it.
const limit = 8 * time.Minute

// exit codes of harmless certify.
const (
	exitCertified    = 0
	exitNotCertified = 1
	exitPartial      = 3
)

// adaptersFlag, when set, names the only adapters TestVerdictMatrix
// certifies, comma-separated: a change to a few entries of the registry
// is proved in minutes, before the whole matrix runs.
var adaptersFlag = flag.String("matrix-adapters", "", "certify only these built-in adapters in TestVerdictMatrix, comma-separated (all when empty)")

// selected returns the registry's entries that adaptersFlag names, or
// every entry when it names none; a name that is no built-in adapter
// fails the test.
func selected(t *testing.T) []builtin.Entry {
	if *adaptersFlag == "" {
		return builtin.Entries()
	}
	var rows []builtin.Entry
	for name := range strings.SplitSeq(*adaptersFlag, ",") {
		e, err := builtin.EntryOf(strings.TrimSpace(name))
		if err != nil {
			t.Fatalf("-matrix-adapters: %v", err)
		}
		rows = append(rows, e)
	}
	return rows
}

// run is one certification and what came of it.
type run struct {
	code           int
	stdout, stderr string
	cert           *certificate.Certificate
	err            error
	took           time.Duration
}

// TestVerdictMatrix certifies every built-in adapter with the real command
// on a throwaway cluster and compares each verdict with the registry, rule
// by rule: correct implementations must be certified, broken ones must
// fail exactly the rules their entry names. Any difference fails the
// build, naming the adapter and the rule.
func TestVerdictMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("certifies every built-in adapter, which takes minutes")
	}
	t.Parallel() // beside TestVerdictMatrixOnAFormation
	rows := selected(t)
	bin := build(t)
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
	runs := make([]run, len(jobs))
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			runs[i] = certify(t, bin, rows[j.row].Adapter.Name, j.filter)
		})
	}
	wg.Wait()
	for i, row := range rows {
		t.Run(row.Adapter.Name, func(t *testing.T) {
			var mine []run
			for k, j := range jobs {
				if j.row == i {
					mine = append(mine, runs[k])
				}
			}
			var took time.Duration
			for _, r := range mine {
				took += r.took
				if r.cert == nil {
					t.Fatalf("no certificate (exit code %d, %v)\nstdout:\n%s\nstderr:\n%s", r.code, r.err, r.stdout, r.stderr)
				}
				if r.cert.DatabaseKind != "cluster" {
					t.Errorf("certified on a %s server; want a throwaway cluster", r.cert.DatabaseKind)
				}
			}
			cert := merge(mine)
			t.Logf("certified in %s, in %d run(s); the broker's longest wait %.2fs of its patience of %gs, given up %d times",
				took.Round(100*time.Millisecond), len(mine), cert.Redelivery.LongestWait, cert.Redelivery.Patience, cert.Redelivery.GaveUp)
			for _, diff := range Compare(cert, row) {
				t.Error(diff)
			}
			if len(mine) == 1 {
				want := map[certificate.Status]int{certificate.StatusCertified: exitCertified, certificate.StatusPartial: exitPartial, certificate.StatusNotCertified: exitNotCertified}[cert.Status]
				if mine[0].code != want {
					t.Errorf("exit code %d with status %s; want %d", mine[0].code, cert.Status, want)
				}
			}
			if cert.Faults["server:crash"] == 0 {
				t.Error("the server never crashed: crash-recovery did not run")
			}
			if t.Failed() {
				for _, r := range mine {
					t.Logf("stdout:\n%s", r.stdout)
				}
			}
		})
	}
}

// merge joins the certificates of runs of one adapter, each of which ran
// some of the rules, into one that holds each rule's verdict from the run
// that ran it, and decides its status from them.
func merge(runs []run) certificate.Certificate {
	cert := *runs[0].cert
	if len(runs) == 1 {
		return cert
	}
	cert.Rules = slices.Clone(cert.Rules)
	cert.Faults = map[string]int64{}
	cert.Redelivery.LongestWait, cert.Redelivery.GaveUp = 0, 0
	for _, r := range runs {
		for kind, n := range r.cert.Faults {
			cert.Faults[kind] += n
		}
		cert.Redelivery.LongestWait = max(cert.Redelivery.LongestWait, r.cert.Redelivery.LongestWait)
		cert.Redelivery.GaveUp += r.cert.Redelivery.GaveUp
		for i, rule := range r.cert.Rules {
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

// build builds the harmless command.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "harmless")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/harmless-dev/harmless/cmd/harmless").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// certify certifies adapter on a throwaway cluster of its own, only the
// rules that filter selects when it is not empty.
func certify(t *testing.T, bin, adapter, filter string) run {
	args := []string{"--provision", "cluster"}
	if filter != "" {
		args = append(args, "--label-filter", filter)
	}
	return certifyWith(t, bin, adapter, args...)
}

// certifyWith certifies adapter with the command's further args.
func certifyWith(t *testing.T, bin, adapter string, more ...string) run {
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
	r := run{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		r.err = err
		return r
	}
	data, err := os.ReadFile(path)
	if err != nil {
		r.err = err
		return r
	}
	var cert certificate.Certificate
	if err := json.Unmarshal(data, &cert); err != nil {
		r.err = err
		return r
	}
	r.cert = &cert
	return r
}
