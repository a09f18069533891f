package soak_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	harmlessexec "github.com/harmless-dev/harmless/adapters/exec"
	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/execchild"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/internal/soak"
)

// soakChild soaks the exec child in mode, with the extra environment env,
// on the tests' server as cfg says (its seed and delivery timeout filled
// in), and returns the report and the soak's error.
func soakChild(t *testing.T, mode string, env []string, cfg soak.Config) (soak.Report, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	adapter, _, err := harmlessexec.Probe(ctx, harmlessexec.Config{Command: execchild.Command(mode), Env: env})
	if err != nil {
		t.Fatal(err)
	}
	return soakOn(t, ctx, adapter, provision.Options{DSN: pgtest.DSN(t), Only: provision.KindDSN}, cfg)
}

// soakOn soaks adapter on the server popts gives as cfg says.
func soakOn(t *testing.T, ctx context.Context, adapter adapters.Adapter, popts provision.Options, cfg soak.Config) (soak.Report, error) {
	t.Helper()
	run, err := harness.Start(ctx, harness.Options{Provision: popts, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := run.Close(context.WithoutCancel(ctx)); err != nil {
			t.Error(err)
		}
	}()
	cfg.Seed, cfg.DeliveryTimeout = time.Now().UnixNano(), harness.DefaultDeliveryTimeout
	rep, err := soak.Run(ctx, run, adapter, cfg, soak.Options{})
	t.Logf("soak of %s (seed %d): verdict %q after %s, %d crashes, totals %+v, error %v",
		adapter.Name, cfg.Seed, rep.Verdict, rep.Elapsed.Round(time.Millisecond), rep.CrashCount(), rep.Totals, err)
	return rep, err
}

// A child that crashes now and then is restarted, as a supervisor would:
// the soak goes on, a correct child soaks clean, and the report counts the
// crashes per instance and quotes the first of each.
func TestACrashingChildIsRestartedAndCounted(t *testing.T) {
	const crashAt = 40
	rep, err := soakChild(t, execchild.CrashAtNth, []string{execchild.EnvCrashAt + "=" + strconv.Itoa(crashAt)},
		soak.Config{Duration: 3 * time.Second, Instances: 2, Duplicates: soak.DefaultDuplicates})
	if err != nil {
		t.Fatalf("a child that crashes every %d deliveries and is restarted: %v", crashAt, err)
	}
	if rep.Verdict != "clean" {
		t.Errorf("verdict %q, want clean: the child is the reference while it lives", rep.Verdict)
	}
	// Each process crashes at its 40th delivery: the soak made far more.
	if rep.Totals.Deliveries < 4*crashAt {
		t.Fatalf("only %d deliveries: too few for a crash to be expected", rep.Totals.Deliveries)
	}
	if len(rep.Crashes) != 2 {
		t.Fatalf("crashes %+v: want both instances' crashes", rep.Crashes)
	}
	for i, c := range rep.Crashes {
		if c.Instance != i+1 || c.Count < 1 || !strings.Contains(c.First, execchild.LastWords) {
			t.Errorf("instance %d's crashes: %+v; want a count and the child's last words", i+1, c)
		}
	}
	// Every crash costs the deliveries in flight at most: the soak went on
	// after each one.
	if most := rep.Totals.Deliveries/crashAt + 2; rep.CrashCount() > most {
		t.Errorf("%d crashes in %d deliveries: at most %d expected", rep.CrashCount(), rep.Totals.Deliveries, most)
	}
}

// A child that dies on every delivery acknowledges nothing: the soak ends
// once no delivery was acknowledged for the no-ack timeout, long before
// its duration, with a NoAckError naming the crashes, and judges none of
// the events it never acknowledged lost.
func TestAChildThatAlwaysCrashesEndsWithNoAck(t *testing.T) {
	const timeout = 2 * time.Second
	// A patience shorter than the timeout: events whose redeliveries ran
	// out of it are unsettled too, not lost.
	cfg := soak.Config{Duration: 2 * time.Minute, Instances: 2, NoAckTimeout: timeout, RedeliveryPatience: 500 * time.Millisecond}
	start := time.Now()
	rep, err := soakChild(t, execchild.CrashOnDeliver, nil, cfg)
	took := time.Since(start)
	var noAck *soak.NoAckError
	if !errors.As(err, &noAck) {
		t.Fatalf("a child that crashes at every delivery: error %v, verdict %q, totals %+v; want a NoAckError", err, rep.Verdict, rep.Totals)
	}
	msg := err.Error()
	for _, want := range []string{"no delivery was acknowledged for 2", "the implementation's processes crashed", execchild.LastWords} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q:\n%s", want, msg)
		}
	}
	// The error counts the crashes up to the moment the soak gave up; the
	// report counts them until every process is closed, and a child that
	// crashes on every delivery may crash once more in between.
	if noAck.Crashes < 1 || noAck.TotalCrashes > rep.CrashCount() || noAck.For < timeout {
		t.Errorf("NoAckError %+v; the report counts %d crashes, which must be at least the error's", noAck, rep.CrashCount())
	}
	if rep.Verdict != "no-ack" || rep.Error != msg || rep.Clean() {
		t.Errorf("verdict %q, error %q, clean %t; want no-ack with the error", rep.Verdict, rep.Error, rep.Clean())
	}
	if rep.Totals.Lost != 0 || rep.Totals.Unsettled == 0 || rep.Totals.Unsettled != rep.Totals.Events {
		t.Errorf("totals %+v: every event unsettled, none lost, expected", rep.Totals)
	}
	// The timeout, the deliveries in flight, setting up and checking: far
	// less than the duration asked for.
	if took > timeout+20*time.Second {
		t.Errorf("the soak took %s to end", took)
	}
}

// A fault the harness injects is not the implementation's silence: while
// the crash nemesis has the server down, no delivery can be acknowledged
// for longer than a short no-ack timeout, and the reference still soaks
// clean.
func TestAServerCrashIsNotANoAck(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	adapter, err := builtin.Lookup("reference")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	rep, err := soakOn(t, ctx, adapter, provision.Options{Only: provision.KindCluster, Logf: t.Logf},
		soak.Config{Duration: 4 * time.Second, Instances: 2, Nemeses: []string{soak.NemesisCrash}, NoAckTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("the reference under server crashes: %v", err)
	}
	if rep.FaultsFired[harness.ServerCrashKind] == 0 {
		t.Fatalf("no server crash fired: %v", rep.FaultsFired)
	}
	if rep.Verdict != "clean" {
		t.Errorf("verdict %q, totals %+v", rep.Verdict, rep.Totals)
	}
}

// panicky is the reference, but every 25th delivery of an instance panics,
// as an in-process implementation's bug would crash a real service's
// process.
type panicky struct {
	adapters.Implementation
	n atomic.Int64
}

func (p *panicky) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if p.n.Add(1)%25 == 0 {
		panic("panicky: nil map in the handler")
	}
	return p.Implementation.Deliver(ctx, d)
}

// An in-process implementation's panic counts as a crash, as certify
// counts it, although the soak keeps no history of its deliveries.
func TestAPanicIsACrash(t *testing.T) {
	ref, err := builtin.Lookup("reference")
	if err != nil {
		t.Fatal(err)
	}
	adapter := adapters.Adapter{Name: "panicky", Declares: adapters.Declaration{}, New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
		impl, err := ref.New(ctx, env)
		return &panicky{Implementation: impl}, err
	}}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	rep, err := soakOn(t, ctx, adapter, provision.Options{DSN: pgtest.DSN(t), Only: provision.KindDSN},
		// Enough events that each of the two instances, which take
		// deliveries from one queue, gets many times 25 of them however
		// unevenly a loaded machine schedules them.
		soak.Config{Events: 2000, Instances: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verdict != "clean" || len(rep.Crashes) != 2 {
		t.Fatalf("verdict %q, crashes %+v: want clean, and both instances' panics", rep.Verdict, rep.Crashes)
	}
	// Each instance counts its own deliveries and panics on every 25th:
	// of D deliveries shared by two, at most D/25 panic, and at least
	// (D-2·24)/25, each instance's last up to 24 not reaching the next.
	least := (rep.Totals.Deliveries - 2*24 + 24) / 25
	if rep.CrashCount() < least || rep.CrashCount() > rep.Totals.Deliveries/25 {
		t.Errorf("%d crashes in %d deliveries, one in 25 panicking", rep.CrashCount(), rep.Totals.Deliveries)
	}
	for _, c := range rep.Crashes {
		if !strings.Contains(c.First, "panicked: ") || !strings.Contains(c.First, "nil map in the handler") {
			t.Errorf("instance %d's first crash: %q", c.Instance, c.First)
		}
	}
}

// poisoned is the reference, but it fails every delivery of two events, as
// a consumer fails on a poison message.
type poisoned struct{ adapters.Implementation }

func (p poisoned) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if d.ID == "e3" || d.ID == "e5" {
		return 0, errors.New("poisoned: cannot parse the payload")
	}
	return p.Implementation.Deliver(ctx, d)
}

// An implementation that fails a few events for good, and answers every
// other, is no dead implementation: once the load is over only those
// events are redelivered, and none is acknowledged for longer than the
// no-ack timeout, but the soak judges them lost, as before.
func TestPoisonEventsAreLostNotNoAck(t *testing.T) {
	ref, err := builtin.Lookup("reference")
	if err != nil {
		t.Fatal(err)
	}
	adapter := adapters.Adapter{Name: "poisoned", New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
		impl, err := ref.New(ctx, env)
		return poisoned{impl}, err
	}}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	rep, err := soakOn(t, ctx, adapter, provision.Options{DSN: pgtest.DSN(t), Only: provision.KindDSN},
		soak.Config{Events: 300, Instances: 2, NoAckTimeout: 100 * time.Millisecond, RedeliveryPatience: 2 * time.Second})
	if err != nil {
		t.Fatalf("a soak of an implementation failing two events for good: %v", err)
	}
	if rep.Verdict != "anomalies" || rep.Totals.Lost != 2 || rep.Totals.Unsettled != 0 {
		t.Errorf("verdict %q, totals %+v: want the two poisoned events lost", rep.Verdict, rep.Totals)
	}
	// The premise: their redeliveries went on for their patience, less a
	// pause of at most a second, long after every other event was
	// acknowledged (the load takes a fraction of a second), and far
	// longer than the no-ack timeout.
	if rep.Elapsed < time.Second {
		t.Errorf("the soak took %s: settling cannot have outlasted the no-ack timeout", rep.Elapsed)
	}
}
