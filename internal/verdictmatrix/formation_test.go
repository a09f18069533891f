package verdictmatrix

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// formationAdapters are the built-in adapters TestVerdictMatrixOnAFormation
// certifies on a replicated formation: the reference, every rule, and the
// three broken adapters that only a failover tells from it, the failover
// fixture's rules. The correct alternatives, whose entries claim they pass
// there too, are certified on a formation by .ci/run, which has the time.
var formationAdapters = []struct {
	name    string
	fixture string // "" for every rule
}{
	{name: "reference"},
	{name: "broken-async-commit", fixture: "failover"},
	{name: "broken-single-host", fixture: "failover"},
	{name: "broken-cached-claims", fixture: "failover"},
}

// TestVerdictMatrixOnAFormation certifies, with the real command on a
// replicated formation of its own (--provision ha), the adapters of
// formationAdapters, and compares each verdict with the registry's on a
// formation, rule by rule. Without pg_auto_failover it is skipped, saying
// why, unless HARMLESS_REQUIRE_HA=1 (as .ci/run sets), when it fails.
func TestVerdictMatrixOnAFormation(t *testing.T) {
	if testing.Short() {
		t.Skip("certifies on replicated formations, which takes minutes")
	}
	// Beside TestVerdictMatrix: a formation's run is mostly waiting for
	// its monitor and its failovers, while the matrix's keep the cores
	// busy.
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	choice, err := provision.Options{Only: provision.KindHA}.Choose(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if choice.Note != "" {
		if os.Getenv("HARMLESS_REQUIRE_HA") == "1" {
			t.Fatalf("HARMLESS_REQUIRE_HA=1, but no formation can start here: %s", choice.Note)
		}
		t.Skipf("no replicated formation can start here (%s): the failover fixture's verdicts are not checked", choice.Note)
	}
	bin := build(t)
	runs := make([]run, len(formationAdapters))
	// Two at a time: a formation is three servers and a monitor.
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for i, a := range formationAdapters {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			args := []string{"--provision", "ha"}
			if a.fixture != "" {
				args = append(args, "--fixture", a.fixture)
			}
			runs[i] = certifyWith(t, bin, a.name, args...)
		})
	}
	wg.Wait()
	for i, a := range formationAdapters {
		t.Run(a.name, func(t *testing.T) {
			r := runs[i]
			if r.cert == nil {
				t.Fatalf("no certificate (exit code %d, %v)\nstdout:\n%s\nstderr:\n%s", r.code, r.err, r.stdout, r.stderr)
			}
			entry, err := builtin.EntryOf(a.name)
			if err != nil {
				t.Fatal(err)
			}
			if !entry.OnFormation {
				t.Fatalf("the registry does not claim its verdicts on a formation (OnFormation)")
			}
			if r.cert.DatabaseKind != string(provision.KindHA) {
				t.Errorf("certified on a %s server; want a replicated formation", r.cert.DatabaseKind)
			}
			var only []string
			if a.fixture != "" {
				only = []string{a.fixture}
			}
			for _, diff := range Compare(*r.cert, entry, only...) {
				t.Error(diff)
			}
			for _, kind := range []string{"server:failover@controlled", "server:failover@hard-kill", "server:replication-stall"} {
				if r.cert.Faults[kind] == 0 {
					t.Errorf("no %s in the certificate's faults %v: the failover fixture did not fail the formation over as planned", kind, r.cert.Faults)
				}
			}
			if !slices.ContainsFunc(r.cert.Reports, func(rep certificate.Report) bool { return rep.Title == "async-replication" }) {
				t.Error("the certificate has no async-replication report: the asynchronous variant did not play")
			}
			if a.fixture == "" && (r.cert.Status != certificate.StatusCertified || r.code != exitCertified) {
				t.Errorf("status %s, exit code %d; want certified, 0", r.cert.Status, r.code)
			}
			t.Logf("certified in %s: %s", r.took.Round(100*time.Millisecond), r.cert.Summary())
			if t.Failed() {
				t.Logf("stdout:\n%s", r.stdout)
			}
		})
	}
}
