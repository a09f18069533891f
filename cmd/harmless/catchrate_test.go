package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite/certificate"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
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
				"--label-filter", "fixture:"+catalogid.ConcurrentDelivery+" && !rule:"+catalogid.ConcurrentDeliveryFailedClaimantNotLost,
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
				if r.Fixture == catalogid.ConcurrentDelivery && r.Verdict == certificate.VerdictFail {
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

var catchRateAdapters = flag.String("catch-rate-adapters", "", "run TestCatchRates for these broken adapters, comma-separated (with -catch-rate-runs); NAME:N runs NAME N times instead")

// TestCatchRates measures, for each broken adapter named by
// -catch-rate-adapters, in how many of -catch-rate-runs certify runs of the
// rules its registry entry says it must fail it failed each of them; each
// must be caught in every run. An adapter named NAME:N is run N times
// instead, so that one command measures side by side adapters whose runs
// cost very different times. Like TestCatchRate it is not part of the
// default test run:
//
//	go test ./cmd/harmless -run TestCatchRates -catch-rate-runs 20 -catch-rate-adapters broken-lossy-key,broken-case-folded
//
// An adapter whose rules to fail are the failover fixture's is certified
// on a replicated formation of its own each run (--provision ha).
func TestCatchRates(t *testing.T) {
	if *catchRateRuns <= 0 || *catchRateAdapters == "" {
		t.Skip("set -catch-rate-runs N and -catch-rate-adapters A,B to measure")
	}
	bin := binary(t)
	dsn := pgtest.DSN(t)
	for _, adapter := range strings.Split(*catchRateAdapters, ",") {
		runs := *catchRateRuns
		if name, n, ok := strings.Cut(adapter, ":"); ok {
			var err error
			if runs, err = strconv.Atoi(n); err != nil || runs <= 0 {
				t.Fatalf("-catch-rate-adapters: %q: want NAME:N with N a positive number of runs", adapter)
			}
			adapter = name
		}
		t.Run(adapter, func(t *testing.T) {
			// Side by side: a run mostly waits on the broker's model, and
			// each has a schema (or a formation) of its own.
			t.Parallel()
			entry, err := builtin.EntryOf(adapter)
			if err != nil {
				t.Fatal(err)
			}
			if !entry.Broken() {
				t.Fatalf("%s must fail no rule: it has no catch rate", adapter)
			}
			args := []string{"--adapter", adapter, "--rule", strings.Join(entry.Fails, ",")}
			needs := func(fixture string) bool {
				return slices.ContainsFunc(entry.Fails, func(id string) bool { return strings.HasPrefix(id, fixture+".") })
			}
			switch {
			case needs(catalogid.Failover):
				// Only a replicated formation plays a failover.
				args = append(args, "--provision", "ha")
			case needs(catalogid.CrashRecovery):
				args = append(args, "--provision", "cluster")
			default:
				args = append(args, "--dsn", dsn)
			}
			caught := map[string]int{}
			for i := range runs {
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
				for _, r := range cert.Rules {
					if r.Verdict == certificate.VerdictFail && slices.Contains(entry.Fails, r.ID) {
						caught[r.ID]++
					}
				}
			}
			for _, id := range entry.Fails {
				t.Logf("%s caught by %s in %d/%d runs", adapter, id, caught[id], runs)
				if caught[id] != runs {
					t.Errorf("rule %s caught %s in %d of %d runs; the registry says it must catch it every time", id, adapter, caught[id], runs)
				}
			}
		})
	}
}
