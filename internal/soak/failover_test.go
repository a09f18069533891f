package soak_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/internal/soak"
)

// needFormation skips the test when no replicated formation can start
// here, saying why, unless HARMLESS_REQUIRE_HA=1 (as .ci/run sets), when
// it fails.
func needFormation(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a replicated formation")
	}
	choice, err := provision.Options{Only: provision.KindHA}.Choose(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if choice.Note != "" {
		if os.Getenv("HARMLESS_REQUIRE_HA") == "1" {
			t.Fatalf("HARMLESS_REQUIRE_HA=1, but no formation can start here: %s", choice.Note)
		}
		t.Skipf("no replicated formation can start here (HARMLESS_REQUIRE_HA=1 makes this a failure): %s", choice.Note)
	}
}

// The reference soaks clean on a replicated formation whose primary the
// failover nemesis takes away again and again, by a controlled failover
// and by a hard kill: every event has exactly one effect on whichever node
// is primary at the end, and every delivery the failovers left unknown is
// resolved by the ledger.
func TestReferenceSoaksCleanThroughFailovers(t *testing.T) {
	needFormation(t)
	adapter, err := builtin.Lookup("reference")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	run, err := harness.Start(ctx, harness.Options{Provision: provision.Options{Only: provision.KindHA, Logf: t.Logf}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := run.Close(context.WithoutCancel(ctx)); err != nil {
			t.Error(err)
		}
	}()
	// A failover, its hold and the restoration take 5 s on an idle
	// formation, and up to 30 s each under the soak's load on a busy
	// machine: rather than a duration long enough for two in the worst
	// case, the load ends (as Ctrl-C ends it) once two failovers, the
	// least that has both kinds, are done and healed. The duration only
	// bounds the wait. Settling then still delivers every event that is
	// due, and the test checks that none was left unsettled: every event
	// is judged, as at the end of an uninterrupted soak.
	const failovers = 2
	stop := make(chan struct{})
	var stopped bool
	cfg := soak.Config{Duration: 3 * time.Minute, Instances: 2, Duplicates: soak.DefaultDuplicates, Conflicts: soak.DefaultConflicts,
		Nemeses: []string{soak.NemesisFailover}, Seed: time.Now().UnixNano(), DeliveryTimeout: harness.DefaultDeliveryTimeout}
	rep, err := soak.Run(ctx, run, adapter, cfg, soak.Options{Stop: stop, Progress: func(p soak.Progress) {
		if p.Faults >= failovers && !stopped {
			stopped = true
			close(stop)
		}
	}})
	t.Logf("soak of reference (seed %d): verdict %q after %s, totals %+v, faults fired %v, error %v",
		cfg.Seed, rep.Verdict, rep.Elapsed.Round(time.Millisecond), rep.Totals, rep.FaultsFired, err)
	for _, w := range rep.Faults {
		t.Logf("window %s %s-%s: %s %s", w.Kind, w.Start.Round(time.Millisecond), w.End.Round(time.Millisecond), w.Detail, w.Err)
	}
	if err != nil {
		t.Fatalf("the reference through failovers: %v", err)
	}
	if !stopped {
		t.Errorf("%d failovers in %s: want %d", len(rep.Faults), cfg.Duration, failovers)
	}
	if rep.Totals.Unsettled != 0 {
		t.Errorf("%d events unsettled: every event must be judged", rep.Totals.Unsettled)
	}
	if rep.Verdict != "clean" || !rep.Clean() {
		t.Errorf("verdict %q, totals %+v, first anomalies %+v", rep.Verdict, rep.Totals, rep.Anomalies[:min(3, len(rep.Anomalies))])
	}

	// At least two failovers, both kinds, each proved.
	kinds := map[provision.FailoverKind]int{}
	for _, w := range rep.Faults {
		if w.Kind != soak.NemesisFailover {
			t.Errorf("a %s window in a soak with only the failover nemesis", w.Kind)
			continue
		}
		if w.Err != "" || w.End <= w.Start {
			t.Errorf("failover window %s-%s: %q, error %q", w.Start, w.End, w.Detail, w.Err)
			continue
		}
		for _, k := range []provision.FailoverKind{provision.FailoverControlled, provision.FailoverHardKill} {
			if strings.HasPrefix(w.Detail, string(k)+" failover from ") {
				kinds[k]++
			}
		}
		if !strings.Contains(w.Detail, "the formation restored") {
			t.Errorf("failover window without its restoration: %q", w.Detail)
		}
	}
	if kinds[provision.FailoverControlled] == 0 || kinds[provision.FailoverHardKill] == 0 {
		t.Errorf("failovers by kind %v in %d windows: want both kinds", kinds, len(rep.Faults))
	}
	for k, n := range kinds {
		if got := rep.FaultsFired[harness.FailoverKindOf(k)]; got != int64(n) {
			t.Errorf("%d %s failovers in the windows, %d in the faults fired %v", n, k, got, rep.FaultsFired)
		}
	}

	// The failovers were felt, and what they left unknown is resolved:
	// each event applied once, acknowledged Applied or by a delivery whose
	// outcome was unknown.
	tt := rep.Totals
	if tt.Unknown == 0 || tt.UnknownApplied+tt.UnknownNotApplied != tt.Unknown {
		t.Errorf("unknown outcomes %d, resolved %d applied and %d not: want some, every one resolved", tt.Unknown, tt.UnknownApplied, tt.UnknownNotApplied)
	}
	if applied := tt.Applied + tt.UnknownApplied; applied != tt.Events {
		t.Errorf("%d events, %d applied (%d acknowledged, %d unknown): each exactly once expected", tt.Events, applied, tt.Applied, tt.UnknownApplied)
	}
}
