package soak_test

import (
	"context"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/execchild"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/internal/soak"
)

func TestMain(m *testing.M) {
	execchild.MaybeServe() // the crash tests run this binary as an exec child
	pgtest.Main(m)
}

// soakFor soaks the built-in adapter name on the tests' server for d with
// the given nemeses, and returns the report.
func soakFor(t *testing.T, name string, d time.Duration, nemeses ...string) soak.Report {
	t.Helper()
	adapter, err := builtin.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	run, err := harness.Start(ctx, harness.Options{Provision: provision.Options{DSN: pgtest.DSN(t), Only: provision.KindDSN}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := run.Close(context.WithoutCancel(ctx)); err != nil {
			t.Error(err)
		}
	}()
	cfg := soak.Config{Duration: d, Instances: 4, Duplicates: soak.DefaultDuplicates, Conflicts: soak.DefaultConflicts,
		Nemeses: nemeses, Seed: time.Now().UnixNano(), DeliveryTimeout: harness.DefaultDeliveryTimeout}
	rep, err := soak.Run(ctx, run, adapter, cfg, soak.Options{})
	if err != nil {
		t.Fatalf("soak of %s: %v", name, err)
	}
	t.Logf("soak of %s (seed %d): %d events, %d deliveries, %.0f acked/s, faults %v, totals %+v",
		name, cfg.Seed, rep.Totals.Events, rep.Totals.Deliveries, rep.Throughput, rep.FaultsFired, rep.Totals)
	for i, a := range rep.Anomalies {
		if i == 5 {
			break
		}
		t.Logf("  %v %s: %s", a.Kinds, a.ID, a.Explanation)
	}
	return rep
}

// Every nemesis a server named by a DSN allows, against the reference:
// nothing is lost, duplicated or wrong, and the faults really fired.
func TestReferenceSoaksClean(t *testing.T) {
	rep := soakFor(t, "reference", 6*time.Second, soak.NemesisKill, soak.NemesisCutBeforeCommit,
		soak.NemesisCutAfterCommit, soak.NemesisDBRaise, soak.NemesisDBSleep, soak.NemesisPurge, soak.NemesisDestination)
	if !rep.Clean() || rep.Verdict != "clean" {
		t.Errorf("the reference's soak found anomalies: %+v", rep.Totals)
	}
	if rep.Totals.Events == 0 || rep.Totals.Deliveries <= rep.Totals.Events {
		t.Errorf("a soak with 30%% duplicates made %d deliveries of %d events", rep.Totals.Deliveries, rep.Totals.Events)
	}
	// Each event applied once: acknowledged Applied, or by a delivery whose
	// outcome was unknown (the ledger names it).
	if applied := rep.Totals.Applied + rep.Totals.UnknownApplied; applied != rep.Totals.Events {
		t.Errorf("%d events, %d applied (%d acknowledged, %d unknown): each exactly once expected",
			rep.Totals.Events, applied, rep.Totals.Applied, rep.Totals.UnknownApplied)
	}
	if len(rep.Faults) == 0 || len(rep.FaultsFired) == 0 {
		t.Errorf("no fault was injected: windows %v, fired %v", rep.Faults, rep.FaultsFired)
	}
	if len(rep.Timeline) == 0 || rep.Throughput <= 0 {
		t.Errorf("no timeline or throughput: %d seconds, %.1f/s", len(rep.Timeline), rep.Throughput)
	}
}

// Check-then-insert applies an event twice when two instances get it at
// once; the soak delivers duplicates concurrently and widens the window
// with database-side sleeps.
func TestCheckThenInsertSoakDuplicates(t *testing.T) {
	rep := soakFor(t, "broken-check-then-insert", 4*time.Second, soak.NemesisDBSleep)
	if rep.Totals.Duplicated == 0 {
		t.Errorf("broken-check-then-insert: no event duplicated: %+v", rep.Totals)
	}
}

// Marker-first commits its marker before the effect: an effect that fails
// after that is never applied, since its redelivery finds the marker.
func TestMarkerFirstSoakLoses(t *testing.T) {
	rep := soakFor(t, "broken-marker-first", 4*time.Second, soak.NemesisDBRaise)
	if rep.Totals.Lost == 0 {
		t.Errorf("broken-marker-first: no event lost under db-raise: %+v", rep.Totals)
	}
}

// An in-memory claim is per instance: a duplicate handed to another instance
// is applied again.
func TestInMemorySoakDuplicatesAcrossInstances(t *testing.T) {
	rep := soakFor(t, "broken-in-memory", 3*time.Second)
	if rep.Totals.Duplicated == 0 {
		t.Errorf("broken-in-memory: no event duplicated: %+v", rep.Totals)
	}
	var across bool
	for _, a := range rep.Anomalies {
		instances := map[int]bool{}
		for _, d := range a.History {
			if d.Outcome == "Applied" {
				instances[d.Instance] = true
			}
		}
		across = across || len(instances) > 1
	}
	if !across {
		t.Error("no anomaly shows an event applied by two instances")
	}
}

// Closing Stop ends the load early: the soak heals, settles and reports
// what ran, marked interrupted, with nothing lost by the interruption.
func TestStopEndsTheLoadAndReportsWhatRan(t *testing.T) {
	adapter, err := builtin.Lookup("reference")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	run, err := harness.Start(ctx, harness.Options{Provision: provision.Options{DSN: pgtest.DSN(t), Only: provision.KindDSN}})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close(context.WithoutCancel(ctx))
	stop := make(chan struct{})
	var once bool
	cfg := soak.Config{Duration: time.Hour, Instances: 2, Duplicates: 0.3, Conflicts: 0.05,
		Nemeses: []string{soak.NemesisKill}, Seed: 1, DeliveryTimeout: harness.DefaultDeliveryTimeout}
	rep, err := soak.Run(ctx, run, adapter, cfg, soak.Options{Stop: stop, Progress: func(p soak.Progress) {
		if p.Acked > 100 && !once {
			once = true
			close(stop)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Interrupted || rep.Elapsed >= cfg.Duration {
		t.Errorf("interrupted %t after %s of a %s soak", rep.Interrupted, rep.Elapsed, cfg.Duration)
	}
	if rep.Totals.Events == 0 || !rep.Clean() {
		t.Errorf("an interrupted soak of the reference: %+v", rep.Totals)
	}
}

// A soak stopped before its first delivery judges nothing: it is an error,
// never a clean verdict.
func TestNoEventIsNoVerdict(t *testing.T) {
	adapter, err := builtin.Lookup("reference")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	run, err := harness.Start(ctx, harness.Options{Provision: provision.Options{DSN: pgtest.DSN(t), Only: provision.KindDSN}})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close(context.WithoutCancel(ctx))
	stop := make(chan struct{})
	close(stop)
	rep, err := soak.Run(ctx, run, adapter, soak.Config{Duration: time.Hour, Instances: 2, Seed: 1,
		DeliveryTimeout: harness.DefaultDeliveryTimeout}, soak.Options{Stop: stop})
	if err == nil || rep.Verdict != "" {
		t.Errorf("a soak that delivered %d events: verdict %q, error %v; want an error and no verdict", rep.Totals.Events, rep.Verdict, err)
	}
}
