package verdictmatrix

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters/alternatives/slow"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/suite"
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

// run is one certification and what came of it.
type run struct {
	code           int
	stdout, stderr string
	cert           *suite.Certificate
	err            error
	took           time.Duration
}

// TestVerdictMatrix certifies every built-in adapter with the real command
// on a throwaway cluster and compares each verdict with the matrix: correct
// implementations must be certified, broken ones must fail the fixtures the
// matrix names. Any difference fails the build, naming the adapter, the
// fixture and the rule.
func TestVerdictMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("certifies every built-in adapter, which takes minutes")
	}
	bin := build(t)
	rows := fixtures.Matrix()
	// The slowest first, so that it does not run alone at the end.
	slices.SortStableFunc(rows, func(a, b fixtures.MatrixRow) int {
		return boolInt(b.Adapter == slow.Name) - boolInt(a.Adapter == slow.Name)
	})
	runs := make([]run, len(rows))
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i, row := range rows {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			runs[i] = certify(t, bin, row.Adapter)
		})
	}
	wg.Wait()
	for i, row := range rows {
		t.Run(row.Adapter, func(t *testing.T) {
			r := runs[i]
			t.Logf("certified in %s", r.took.Round(100*time.Millisecond))
			if r.cert == nil {
				t.Fatalf("no certificate (exit code %d, %v)\nstdout:\n%s\nstderr:\n%s", r.code, r.err, r.stdout, r.stderr)
			}
			for _, diff := range suite.CompareMatrix(*r.cert, row) {
				t.Error(diff)
			}
			want := map[suite.Status]int{suite.StatusCertified: exitCertified, suite.StatusPartial: exitPartial, suite.StatusNotCertified: exitNotCertified}[r.cert.Status]
			if r.code != want {
				t.Errorf("exit code %d with status %s; want %d", r.code, r.cert.Status, want)
			}
			if r.cert.DatabaseKind != "cluster" || r.cert.Faults["server:crash"] == 0 {
				t.Errorf("certified on a %s server with %d crashes; want a throwaway cluster, crashed", r.cert.DatabaseKind, r.cert.Faults["server:crash"])
			}
			if t.Failed() {
				t.Logf("stdout:\n%s", r.stdout)
			}
		})
	}
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

// certify certifies adapter on a throwaway cluster of its own.
func certify(t *testing.T, bin, adapter string) run {
	path := filepath.Join(t.TempDir(), adapter+".json")
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "certify", "--adapter", adapter, "--provision", "cluster", "--json", path)
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
	var cert suite.Certificate
	if err := json.Unmarshal(data, &cert); err != nil {
		r.err = err
		return r
	}
	r.cert = &cert
	return r
}
