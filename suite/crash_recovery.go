package suite

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/provision"
)

// Numbers of the crash-recovery fixture.
const (
	// crashInFlight is how many deliveries are in flight when the server
	// crashes, spread over two workers.
	crashInFlight = 16
	// crashSettled is how many events are delivered and acknowledged
	// before the in-flight deliveries start.
	crashSettled = 4
	// crashSleep is how long the sleep fault holds an in-flight
	// transaction: far longer than the harness takes to crash the server,
	// which ends the sleep.
	crashSleep = time.Minute
	// stallLimit bounds the wait for every in-flight delivery to stall.
	stallLimit = 5 * time.Second
	// stallSettle ends the wait early once some deliveries are held and no
	// more have joined them for this long: an implementation that lets
	// fewer deliveries into the database at once (a small pool, one
	// connection) is crashed with those that got in.
	stallSettle = 500 * time.Millisecond
	// stallPoll is how often the harness looks for stalled deliveries.
	stallPoll = 20 * time.Millisecond
	// restartBudget is what a scenario's budget allows for crashing the
	// server and starting it again, crash recovery included.
	restartBudget = 2 * time.Minute
)

// Why the fixture cannot run: the rules are then not-supported.
const (
	crashNeedsOwned = "needs a server the harness owns (a throwaway cluster or a container); the run uses a server named by a DSN"
	crashContainer  = "a container comes back from a crash on a new host port, so an implementation holding the old DSN cannot reconnect by itself; the wire proxy will give it a stable address, until then run on a throwaway cluster (--provision cluster)"
	crashMoved      = "the server came back from the crash on another port (the old one was taken), so an implementation holding the old DSN could not reconnect by itself"
)

// crashUnsupported says why the run cannot crash its server and expect the
// implementation to reconnect by itself; "" when it can.
func (s *state) crashUnsupported() string {
	switch srv := s.run.Server(); {
	case !srv.Owned():
		return crashNeedsOwned
	case srv.Kind == provision.KindContainer:
		return crashContainer
	}
	return ""
}

// notSupported skips the current rule as not-supported, saying why, when
// reason is set.
func notSupported(reason string) {
	if reason != "" {
		Skip(notSupportedPrefix + reason)
	}
}

// crashAndRestart crashes the run's server and starts it again. It fails
// the node when either cannot be done; the recovery's evidence says
// whether the crash was real.
func (s *state) crashAndRestart(ctx context.Context) harness.Recovery {
	GinkgoHelper()
	c, err := s.run.CrashServer(ctx)
	Expect(err).NotTo(HaveOccurred(), "crash the server")
	rec, err := s.run.RestartServer(ctx, c)
	Expect(err).NotTo(HaveOccurred(), "restart the server after the crash")
	return rec
}

func (s *state) crashRecovery() {
	Describe(fixtures.CrashRecovery, Label("fixture:"+fixtures.CrashRecovery), Serial, func() {
		s.crashAfterAck()
		for _, st := range stalls {
			s.crashInFlight(st)
		}
	})
}

// crashAfterAck crashes the server after a delivery was acknowledged, then
// redelivers the event to the same instance.
func (s *state) crashAfterAck() {
	Describe("after an acknowledged delivery", Ordered, ContinueOnFailure, func() {
		var (
			skip                  string
			ev                    = newEvent(fixtures.CrashRecovery, "acked")
			before, after         []harness.Attempt
			rowsBefore, rowsAfter int64
			restored, effects     []ledger.Entry
			history               []harness.Attempt
			rec                   harness.Recovery
		)
		// One instance to build; a delivery until terminal before the
		// crash, a redelivery until terminal after it; the restart.
		sc := s.scenario(fixtures.CrashRecovery+" / after an acknowledged delivery", 1+2*s.cfg.maxTries, restartBudget)
		BeforeAll(func(ctx SpecContext) {
			if skip = s.crashUnsupported(); skip != "" {
				return
			}
			spec := sc.begin(ctx)
			before = spec.DeliverUntilTerminal(ctx, 1, ev, s.cfg.maxTries)
			var err error
			rowsBefore, err = spec.StateRows(ctx)
			Expect(err).NotTo(HaveOccurred())
			if rec = s.crashAndRestart(ctx); rec.Moved {
				skip = crashMoved
				return
			}
			restored, err = spec.Effects(ctx, ev)
			Expect(err).NotTo(HaveOccurred())
			rowsAfter, err = spec.StateRows(ctx)
			Expect(err).NotTo(HaveOccurred())
			after = spec.DeliverUntilTerminal(ctx, 1, ev, s.cfg.maxTries)
			effects, err = spec.Effects(ctx, ev)
			Expect(err).NotTo(HaveOccurred())
			history = spec.History(ev)
		}, sc.timeout())

		sc.noteRule(fixtures.CrashRecoveryAppliedSurvives, func() ([]string, string) {
			notSupported(skip)
			if p := rec.Problem(); p != "" {
				return []string{"the planned fault did not fire: " + p}, ""
			}
			describe := "\n" + rec.String() + "\n" + harness.DescribeEvent(ev, effects, history)
			if first := before[len(before)-1]; !first.Acked() || first.Outcome != adapters.Applied {
				return []string{fmt.Sprintf("before the crash, the delivery to worker 1 ended %s (expected Applied): nothing acknowledged could be lost%s",
					first.Result(), describe)}, ""
			}
			var seen []string
			if len(restored) != 1 {
				seen = append(seen, fmt.Sprintf("right after the restart the ledger holds %d effects of the event acknowledged as Applied before the crash (expected 1)", len(restored)))
			}
			if rowsAfter < rowsBefore {
				seen = append(seen, fmt.Sprintf("the implementation's tables held %d rows before the crash and %d after it: its deduplication state did not survive the crash", rowsBefore, rowsAfter))
			}
			switch last := after[len(after)-1]; {
			case !last.Acked():
				seen = append(seen, fmt.Sprintf("after the restart worker 1 acknowledged none of %d redeliveries, the last ended %s: it did not reconnect by itself", len(after), last.Result()))
			case last.Outcome != adapters.Duplicate:
				seen = append(seen, fmt.Sprintf("after the restart the redelivery to worker 1 ended %s (expected Duplicate)", last.Outcome))
			}
			if len(effects) != 1 {
				seen = append(seen, fmt.Sprintf("after the redelivery the ledger holds %d effects (expected 1)", len(effects)))
			}
			if len(seen) > 0 {
				return []string{strings.Join(seen, "; ") + describe}, ""
			}
			note := fmt.Sprintf("%s; the implementation's tables held %d row(s) before the crash and %d after; the redelivery to worker 1 was Duplicate", rec, rowsBefore, rowsAfter)
			if failed := len(after) - 1; failed > 0 {
				note += fmt.Sprintf(" after %d failed attempt(s) (the first ended %s)", failed, after[0].Result())
			}
			return nil, note
		})
	})
}

// stall is a way to hold in-flight deliveries where the server's crash
// hits them.
type stall struct {
	name string
	// arm prepares the stall of events and returns a function that counts
	// the deliveries it holds, what it is and a function that ends it. It
	// returns a reason instead when the implementation gives it nothing
	// to hold.
	arm func(ctx context.Context, spec *harness.Spec, events []adapters.Event) (held func(context.Context) (int, error), what string, release func(context.Context) error, unsupported string)
}

var stalls = []stall{
	{name: "held inside their transactions by a sleep at the effect", arm: sleepAtEffect},
	{name: "stopped at their first write to the implementation's tables", arm: holdWrites},
}

// sleepAtEffect plans a long sleep at the effect of each event's first
// attempt: each delivery stalls with its transaction open, its claim (if it
// made one) and its effect inserted but not committed.
func sleepAtEffect(ctx context.Context, spec *harness.Spec, events []adapters.Event) (func(context.Context) (int, error), string, func(context.Context) error, string) {
	GinkgoHelper()
	sleeps := make([]*faults.Fault, len(events))
	for i, ev := range events {
		var err error
		sleeps[i], err = spec.Arm(ctx, faults.Plan{Namespace: ev.Namespace, ID: ev.ID, Attempt: 1, Point: faults.AtEffect, Action: faults.Sleep, Sleep: crashSleep})
		Expect(err).NotTo(HaveOccurred())
	}
	held := func(ctx context.Context) (int, error) {
		n := 0
		for _, f := range sleeps {
			fired, err := spec.Fired(ctx, f)
			if err != nil {
				return 0, err
			}
			if fired > 0 {
				n++
			}
		}
		return n, nil
	}
	return held, fmt.Sprintf("a sleep of %s at the effect of each event's attempt 1", crashSleep), nil, ""
}

// holdWrites locks the implementation's tables against writes: each
// delivery stalls at its first write to its deduplication state, after
// whatever it committed before that write.
func holdWrites(ctx context.Context, spec *harness.Spec, _ []adapters.Event) (func(context.Context) (int, error), string, func(context.Context) error, string) {
	GinkgoHelper()
	h, err := spec.HoldWrites(ctx)
	Expect(err).NotTo(HaveOccurred())
	if h == nil {
		return nil, "", nil, "the implementation keeps no table in the spec's schema, so the harness has no write of it to hold"
	}
	return h.Waiting, "the harness's EXCLUSIVE lock on " + h.String(), h.Release, ""
}

// inFlight is one event of an in-flight scenario and what became of it.
type inFlight struct {
	ev       adapters.Event
	worker   int
	attempts []harness.Attempt // every delivery, in order
	effects  []ledger.Entry
	history  []harness.Attempt
}

func (f *inFlight) last() harness.Attempt { return f.attempts[len(f.attempts)-1] }

// crashInFlight crashes the server while deliveries are held by st, then
// redelivers every event that is not acknowledged to the worker that had
// it.
func (s *state) crashInFlight(st stall) {
	Describe("with deliveries in flight, "+st.name, Ordered, ContinueOnFailure, func() {
		var (
			skip            string
			what            string
			settled, flying []*inFlight
			all             []*inFlight // settled, then flying
			heldAtCrash     int
			returnedAtCrash int64
			redelivered     int
			rec             harness.Recovery
			heldErr         error
		)
		// Two instances to build; the settled events until terminal; the
		// in-flight deliveries, at once; the wait for them to stall; the
		// restart; then every event redelivered until terminal, one after
		// another.
		sc := s.scenario(fixtures.CrashRecovery+" / with deliveries in flight, "+st.name,
			2+crashSettled*s.cfg.maxTries+1+(crashSettled+crashInFlight)*s.cfg.maxTries, stallLimit+restartBudget)
		BeforeAll(func(ctx SpecContext) {
			if skip = s.crashUnsupported(); skip != "" {
				return
			}
			spec := sc.begin(ctx)
			for i := range crashSettled {
				f := &inFlight{ev: newEvent(fixtures.CrashRecovery, fmt.Sprintf("settled-%d", i+1)), worker: 1 + i%2}
				f.attempts = spec.DeliverUntilTerminal(ctx, f.worker, f.ev, s.cfg.maxTries)
				settled = append(settled, f)
			}
			var events []adapters.Event
			for i := range crashInFlight {
				f := &inFlight{ev: newEvent(fixtures.CrashRecovery, fmt.Sprintf("in-flight-%d", i+1)), worker: 1 + i%2}
				flying = append(flying, f)
				events = append(events, f.ev)
			}
			all = append(append([]*inFlight(nil), settled...), flying...)
			held, desc, release, unsupported := st.arm(ctx, spec, events)
			if skip, what = unsupported, desc; skip != "" {
				return
			}

			var returned atomic.Int64
			var done sync.WaitGroup
			for _, f := range flying {
				done.Add(1)
				go func() {
					defer GinkgoRecover()
					defer done.Done()
					f.attempts = []harness.Attempt{spec.Deliver(ctx, f.worker, f.ev)}
					returned.Add(1)
				}()
			}
			heldAtCrash, heldErr = awaitStall(ctx, held, func() int { return int(returned.Load()) }, len(flying))
			returnedAtCrash = returned.Load()
			rec = s.crashAndRestart(ctx)
			// The deliveries the crash hit return once their connections
			// die; one that retries by itself may succeed after the
			// restart.
			done.Wait()
			if release != nil {
				_ = release(ctx) // the crash ended the hold
			}
			if rec.Moved {
				skip = crashMoved
				return
			}
			for _, f := range all {
				if !f.last().Terminal() {
					redelivered++
					f.attempts = append(f.attempts, spec.DeliverUntilTerminal(ctx, f.worker, f.ev, s.cfg.maxTries)...)
				}
			}
			for _, f := range all {
				var err error
				f.effects, err = spec.Effects(ctx, f.ev)
				Expect(err).NotTo(HaveOccurred())
				f.history = spec.History(f.ev)
			}
		}, sc.timeout())

		sc.noteRule(fixtures.CrashRecoveryInFlightExactlyOnce, func() ([]string, string) {
			notSupported(skip)
			if p := rec.Problem(); p != "" {
				return []string{"the planned fault did not fire: " + p}, ""
			}
			if heldErr != nil {
				return []string{fmt.Sprintf("could not tell whether the planned stall (%s) held any delivery: %v", what, heldErr)}, ""
			}
			if heldAtCrash == 0 {
				return []string{fmt.Sprintf("the planned stall (%s) did not fire: none of the %d in-flight deliveries was held when the server crashed (%d had returned), so the crash proves nothing",
					what, len(flying), returnedAtCrash)}, ""
			}
			story := fmt.Sprintf("\n%d of %d in-flight deliveries were held by %s when the server crashed, %d had returned; %s",
				heldAtCrash, len(flying), what, returnedAtCrash, rec)
			var problems []string
			for _, f := range all {
				var seen string
				switch {
				case len(f.effects) == 0 && ackedApplied(f.history):
					seen = "was acknowledged as Applied, yet has no effect after the crash"
				case !f.last().Terminal():
					seen = fmt.Sprintf("was never acknowledged after the restart: %d deliveries to worker %d, the last ended %s; it has %d effects",
						len(f.attempts), f.worker, f.last().Result(), len(f.effects))
				case len(f.effects) != 1:
					seen = fmt.Sprintf("has %d effects (expected 1)", len(f.effects))
				}
				if seen != "" {
					problems = append(problems, fmt.Sprintf("event %s %s\n%s", f.ev, seen, harness.DescribeEvent(f.ev, f.effects, f.history)))
				}
			}
			if len(problems) > 0 {
				problems[0] += story
				return problems, ""
			}
			return nil, fmt.Sprintf("%d of %d in-flight deliveries held by %s at the crash, %d had returned; %s; %d events redelivered after the restart; all %d events have one effect",
				heldAtCrash, len(flying), what, returnedAtCrash, rec, redelivered, len(all))
		})
	})
}

// ackedApplied reports whether any of attempts was acknowledged as Applied.
func ackedApplied(attempts []harness.Attempt) bool {
	for _, a := range attempts {
		if a.Acked() && a.Outcome == adapters.Applied {
			return true
		}
	}
	return false
}

// awaitStall waits until each of n in-flight deliveries is held or has
// returned, until the number held has not grown for stallSettle, or until
// stallLimit has passed, and returns how many were held then.
func awaitStall(ctx context.Context, held func(context.Context) (int, error), returned func() int, n int) (int, error) {
	limit := time.NewTimer(stallLimit)
	defer limit.Stop()
	tick := time.NewTicker(stallPoll)
	defer tick.Stop()
	last, since := 0, time.Now()
	for {
		k, err := held(ctx)
		if err != nil || k+returned() >= n {
			return k, err
		}
		if k != last {
			last, since = k, time.Now()
		} else if k > 0 && time.Since(since) >= stallSettle {
			return k, nil
		}
		select {
		case <-ctx.Done():
			return k, context.Cause(ctx)
		case <-limit.C:
			return k, nil
		case <-tick.C:
		}
	}
}
