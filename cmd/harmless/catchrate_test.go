package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/matrix"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite/certificate"
)

var catchRateRuns = flag.Int("catch-rate-runs", 0, "run TestCatchRate with this many certify runs per adapter (0 skips it)")

// TestCatchRate measures how deterministically concurrent-delivery catches
// the check-then-insert race, and that it never fails the reference. Each
// run is a whole certify of the fixture with one plain and one overlapping
// round. It is not part of the default test run; .ci/run runs it with
//
//	go test ./cmd/harmless -run TestCatchRate -catch-rate-runs 100
func TestCatchRate(t *testing.T) {
	if *catchRateRuns <= 0 {
		t.Skip("set -catch-rate-runs N to measure")
	}
	bin := binary(t)
	dsn := pgtest.DSN(t)
	type tally struct{ failed, plain, overlap int }
	measure := func(adapter string) tally {
		var n tally
		for i := range *catchRateRuns {
			path := filepath.Join(t.TempDir(), fmt.Sprintf("%s-%d.json", adapter, i))
			// The race, and only the race: the failed-claimant variants
			// measure something else, and take longer.
			runCertify(t, bin, nil, "--adapter", adapter, "--dsn", dsn, "--json", path,
				"--label-filter", "fixture:"+fixtures.ConcurrentDelivery+" && !rule:"+fixtures.ConcurrentDeliveryFailedClaimantNotLost,
				"--rounds", "1", "--overlap-rounds", "1")
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%s run %d: no certificate: %v", adapter, i+1, err)
			}
			var cert certificate.Certificate
			if err := json.Unmarshal(data, &cert); err != nil {
				t.Fatal(err)
			}
			var messages []string
			for _, r := range cert.Rules {
				if r.Fixture == fixtures.ConcurrentDelivery && r.Verdict == certificate.VerdictFail {
					messages = append(messages, r.Message)
				}
			}
			all := strings.Join(messages, "\n")
			if len(messages) > 0 {
				n.failed++
			}
			if strings.Contains(all, "(plain, ") {
				n.plain++
			}
			if strings.Contains(all, "(overlap, ") {
				n.overlap++
			}
		}
		return n
	}
	runs := *catchRateRuns
	broken := measure("broken-check-then-insert")
	t.Logf("broken-check-then-insert caught in %d/%d runs (plain round: %d/%d, overlapping round: %d/%d)",
		broken.failed, runs, broken.plain, runs, broken.overlap, runs)
	reference := measure("reference")
	t.Logf("reference failed (false failures) in %d/%d runs", reference.failed, runs)
	if broken.overlap != runs {
		t.Errorf("the overlapping round caught the race in %d of %d runs; it must catch it every time", broken.overlap, runs)
	}
	if reference.failed != 0 {
		t.Errorf("the reference failed concurrent-delivery in %d of %d runs", reference.failed, runs)
	}
}

var catchRateAdapters = flag.String("catch-rate-adapters", "", "run TestCatchRates for these broken adapters, comma-separated (with -catch-rate-runs)")

// TestCatchRates measures, for each broken adapter named by
// -catch-rate-adapters, in how many of -catch-rate-runs certify runs of the
// fixtures its matrix row says it must fail it did fail every one of them;
// each must be caught in every run. Like TestCatchRate it is not part of
// the default test run:
//
//	go test ./cmd/harmless -run TestCatchRates -catch-rate-runs 20 -catch-rate-adapters broken-lossy-key,broken-case-folded
func TestCatchRates(t *testing.T) {
	if *catchRateRuns <= 0 || *catchRateAdapters == "" {
		t.Skip("set -catch-rate-runs N and -catch-rate-adapters A,B to measure")
	}
	bin := binary(t)
	dsn := pgtest.DSN(t)
	for _, adapter := range strings.Split(*catchRateAdapters, ",") {
		t.Run(adapter, func(t *testing.T) {
			row, err := matrix.RowOf(adapter)
			if err != nil {
				t.Fatal(err)
			}
			if len(row.MustFail) == 0 {
				t.Fatalf("%s must fail no fixture: it has no catch rate", adapter)
			}
			var filter []string
			for _, f := range row.MustFail {
				filter = append(filter, "fixture:"+f)
			}
			args := []string{"--adapter", adapter, "--label-filter", strings.Join(filter, " || ")}
			if !slices.Contains(row.MustFail, fixtures.CrashRecovery) {
				args = append(args, "--dsn", dsn)
			} else {
				args = append(args, "--provision", "cluster")
			}
			caught := map[string]int{}
			for i := range *catchRateRuns {
				path := filepath.Join(t.TempDir(), fmt.Sprintf("%d.json", i))
				runCertify(t, bin, nil, append(args, "--json", path)...)
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("run %d: no certificate: %v", i+1, err)
				}
				var cert certificate.Certificate
				if err := json.Unmarshal(data, &cert); err != nil {
					t.Fatal(err)
				}
				failed := map[string]bool{}
				for _, r := range cert.Rules {
					if r.Level == fixtures.Must && r.Verdict == certificate.VerdictFail {
						failed[r.Fixture] = true
					}
				}
				for _, f := range row.MustFail {
					if failed[f] {
						caught[f]++
					}
				}
			}
			for _, f := range row.MustFail {
				t.Logf("%s caught by %s in %d/%d runs", adapter, f, caught[f], *catchRateRuns)
				if caught[f] != *catchRateRuns {
					t.Errorf("%s caught %s in %d of %d runs; it must catch it every time", f, adapter, caught[f], *catchRateRuns)
				}
			}
		})
	}
}
