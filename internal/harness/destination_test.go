package harness_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/external"
	"github.com/harmless-dev/harmless/internal/harness"
)

// TestSendPace: a declared delay gets half of itself as a margin, at least
// a second; no declaration gets the default; the bounds never overflow.
func TestSendPace(t *testing.T) {
	for delay, want := range map[time.Duration]time.Duration{
		0:                      harness.DefaultSendPace,
		300 * time.Millisecond: 1300 * time.Millisecond,
		2 * time.Second:        3 * time.Second,
		3 * time.Second:        4500 * time.Millisecond,
		time.Minute:            90 * time.Second,
	} {
		d := adapters.Declaration{ExternalEffects: adapters.Outbox, MaxSendDelay: delay}
		if got := harness.SendPace(d); got != want {
			t.Errorf("SendPace with a delay of %s = %s; want %s", delay, got, want)
		}
	}
	short := adapters.Declaration{ExternalEffects: adapters.Outbox, MaxSendDelay: 300 * time.Millisecond}
	if got := harness.QuietBound(short, time.Second); got != 13*time.Second {
		t.Errorf("QuietBound of a 1.3s pace = %s; want ten paces, 13s", got)
	}
	if got := harness.QuietBound(short, time.Minute); got != time.Minute {
		t.Errorf("QuietBound with a delivery timeout of 1m = %s; want the timeout", got)
	}
	// Two drains of 15s (and their grace of 5s), then fifty seconds.
	if got := harness.DrainLimit(adapters.Declaration{ExternalEffects: adapters.Outbox}, 15*time.Second, 2); got != 90*time.Second {
		t.Errorf("DrainLimit of two instances at the default pace = %s; want 1m30s", got)
	}
	// The longest delay a Duration holds gives waits that a caller can
	// still add up with a budget: they stop far short of overflow.
	huge := adapters.Declaration{ExternalEffects: adapters.Outbox, MaxSendDelay: math.MaxInt64}
	pace, limit := harness.SendPace(huge), harness.DrainLimit(huge, 15*time.Second, 2)
	if pace < 365*24*time.Hour || limit < pace || pace+2*limit+time.Hour < limit {
		t.Errorf("with the longest delay, SendPace = %s and DrainLimit = %s; want at least a year each, and room to add them", pace, limit)
	}
}

// relayed is an instance with an outbox relay: it sends one event's
// effect to the play's destination in the background, at its own pace.
// It has no Drain.
type relayed struct{ fake }

// drainable is a relayed instance with a Drain.
type drainable struct {
	relayed
	drain func(ctx context.Context) error
}

func (d drainable) Drain(ctx context.Context) error { return d.drain(ctx) }

// relay describes the background sends of a test's instance: after each
// gap in turn (the first counted from the instance's construction, as a
// relay's first poll after a commit), it sends ev's effect; when forever,
// it keeps sending at the last gap until the test ends.
type relay struct {
	gaps    []time.Duration
	forever bool
}

// relayPlay opens a play of an adapter declaring declares (external
// effects included) whose instance 1 runs r; drain, when not nil, is the
// instance's Drain. It returns the play once instance 1 is built and its
// relay is running. The relay stops, and is waited for, when the test
// ends. Its event is never delivered: the ledger owes the destination
// nothing, and no commit tells anything of the relay's pace, so Drain
// waits for the whole send pace without a request (settle_test.go has
// relays of effects committed).
func relayPlay(t *testing.T, declares adapters.Declaration, r relay, drain func(context.Context) error) *harness.Play {
	t.Helper()
	run := startRun(t, shortTimeout)
	ev := event("relayed-" + randomHex(t, 4))
	done := make(chan struct{})
	adapter := adapters.Adapter{Name: "relay", Declares: declares, New: func(_ context.Context, env adapters.Env) (adapters.Implementation, error) {
		go sendAtPace(t, env.Destination, ev, r, done)
		if drain != nil {
			return drainable{drain: drain}, nil
		}
		return relayed{}, nil
	}}
	play := newPlay(t, run, adapter)
	if _, err := play.OpenDestination(t.Context()); err != nil {
		t.Fatalf("open the destination: %v", err)
	}
	if _, err := play.Instance(t.Context(), 1); err != nil {
		t.Fatalf("build instance 1: %v", err)
	}
	t.Cleanup(func() { <-done }) // before the play closes its destination
	return play
}

// sendAtPace sends ev's effect to url as r says, and closes done when it
// stopped: after its last gap, or when the test ends.
func sendAtPace(t *testing.T, url string, ev adapters.Event, r relay, done chan<- struct{}) {
	defer close(done)
	ctx := t.Context()
	for i := 0; i < len(r.gaps) || (r.forever && len(r.gaps) > 0); i++ {
		timer := time.NewTimer(r.gaps[min(i, len(r.gaps)-1)])
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		if err := external.Send(ctx, nil, url, external.Key(ev), ev); err != nil && ctx.Err() == nil {
			t.Errorf("relay: send %d: %v", i+1, err)
		}
	}
}

// drain drains play and returns what Drain said, how long it took and its
// error.
func drain(t *testing.T, play *harness.Play) (string, time.Duration, error) {
	t.Helper()
	start := time.Now()
	what, err := play.Drain(t.Context())
	took := time.Since(start)
	t.Logf("Drain took %s: %s (%v)", took.Round(time.Millisecond), what, err)
	return what, took, err
}

// lastRequest returns when the destination read the play's last request,
// after checking that it read want requests.
func lastRequest(t *testing.T, play *harness.Play, want int) time.Time {
	t.Helper()
	recs := play.Destination().Records()
	if len(recs) != want {
		t.Fatalf("the destination had read %d requests when Drain returned; want all %d the relay sent", len(recs), want)
	}
	return recs[len(recs)-1].At
}

// TestDrainWaitsForARelayPollingEvery3s: without a declared delay, the
// harness waits out a relay that polls every 3 s, sends 3 s after the
// commit and retries on its next poll, even when its instance answers
// that it cannot be drained (as an exec child without drain does).
func TestDrainWaitsForARelayPollingEvery3s(t *testing.T) {
	t.Parallel()
	declares := adapters.Declaration{ExternalEffects: adapters.Outbox}
	play := relayPlay(t, declares, relay{gaps: []time.Duration{3 * time.Second, 3 * time.Second}}, func(context.Context) error {
		return errors.ErrUnsupported
	})
	what, _, err := drain(t, play)
	returned := time.Now()
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	last := lastRequest(t, play, 2)
	if quiet := returned.Sub(last); quiet < harness.DefaultSendPace {
		t.Errorf("Drain returned %s after the relay's last request; want at least the default pace %s", quiet, harness.DefaultSendPace)
	}
	for _, want := range []string{"instances [1] cannot be drained", "no request for 5s (the default send pace; declare max_send_delay_s to change it)", "s in all"} {
		if !strings.Contains(what, want) {
			t.Errorf("Drain said %q; want it to say %q", what, want)
		}
	}
}

// TestDrainWaitsAtTheDeclaredPace: a relay that declares 1.5 s between its
// sends, and sends at gaps a little shorter, is waited for at that pace
// and its margin.
func TestDrainWaitsAtTheDeclaredPace(t *testing.T) {
	t.Parallel()
	declares := adapters.Declaration{ExternalEffects: adapters.Outbox, MaxSendDelay: 1500 * time.Millisecond}
	gap := 1400 * time.Millisecond
	play := relayPlay(t, declares, relay{gaps: []time.Duration{gap, gap, gap}}, nil)
	what, _, err := drain(t, play)
	returned := time.Now()
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	last := lastRequest(t, play, 3)
	if quiet, pace := returned.Sub(last), harness.SendPace(declares); quiet < pace {
		t.Errorf("Drain returned %s after the relay's last request; want at least the pace %s", quiet, pace)
	}
	if want := "no request for 2.5s (the declared max_send_delay_s of 1.5s and a margin)"; !strings.Contains(what, want) {
		t.Errorf("Drain said %q; want it to say %q", what, want)
	}
}

// TestDrainOfARelayThatNeverSends: a relay that sends nothing costs one
// send pace, far short of the bound.
func TestDrainOfARelayThatNeverSends(t *testing.T) {
	t.Parallel()
	declares := adapters.Declaration{ExternalEffects: adapters.Outbox, MaxSendDelay: 300 * time.Millisecond}
	play := relayPlay(t, declares, relay{}, nil)
	what, took, err := drain(t, play)
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	pace, bound := harness.SendPace(declares), harness.QuietBound(declares, shortTimeout)
	if took < pace || took >= pace+patience || pace+patience >= bound {
		t.Errorf("Drain took %s; want one pace %s, within %s, and short of the bound %s", took, pace, patience, bound)
	}
	if n := len(play.Destination().Records()); n != 0 {
		t.Errorf("the destination read %d requests from a relay that sends none", n)
	}
	if want := "no request for 1.3s"; !strings.Contains(what, want) {
		t.Errorf("Drain said %q; want it to say %q", what, want)
	}
}

// TestDrainCutsARelayThatNeverStops: a relay that sends every 200 ms,
// forever, is waited for until the bound, and the drain says it was cut.
func TestDrainCutsARelayThatNeverStops(t *testing.T) {
	t.Parallel()
	declares := adapters.Declaration{ExternalEffects: adapters.Outbox, MaxSendDelay: 300 * time.Millisecond}
	play := relayPlay(t, declares, relay{gaps: []time.Duration{200 * time.Millisecond}, forever: true}, nil)
	what, took, err := drain(t, play)
	if !errors.Is(err, harness.ErrStillSending) {
		t.Errorf("Drain: %v; want ErrStillSending", err)
	}
	bound := harness.QuietBound(declares, shortTimeout)
	if took < bound || took >= bound+patience {
		t.Errorf("Drain took %s; want the bound %s, within %s", took, bound, patience)
	}
	if want := "the longest the harness waits (10 times that pace, or the delivery timeout when longer): the destination was still receiving requests"; !strings.Contains(what, want) {
		t.Errorf("Drain said %q; want it to say %q", what, want)
	}
	if n := len(play.Destination().Records()); n < 10 {
		t.Errorf("the relay sent %d requests in %s; a relay sending every 200ms sends more", n, took)
	}
}

// TestDrainKeepsTheDeclaredPaceAfterADrain: a Drain that returns at once,
// before its relay's sends, does not make the harness judge before the
// declared pace; without a declaration it is the fast path, trusted.
func TestDrainKeepsTheDeclaredPaceAfterADrain(t *testing.T) {
	t.Parallel()
	early := func(context.Context) error { return nil }
	gaps := relay{gaps: []time.Duration{250 * time.Millisecond, 250 * time.Millisecond}}

	declares := adapters.Declaration{ExternalEffects: adapters.Outbox, MaxSendDelay: 300 * time.Millisecond}
	play := relayPlay(t, declares, gaps, early)
	what, _, err := drain(t, play)
	returned := time.Now()
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	last := lastRequest(t, play, 2)
	if quiet, pace := returned.Sub(last), harness.SendPace(declares); quiet < pace {
		t.Errorf("Drain returned %s after the relay's last request; want at least the declared pace %s", quiet, pace)
	}
	for _, want := range []string{"drained instances [1] in ", ", the declared send pace holds after a drain, so waited until the destination had had no request for 1.3s"} {
		if !strings.Contains(what, want) {
			t.Errorf("Drain said %q; want it to say %q", what, want)
		}
	}

	trusted := relayPlay(t, adapters.Declaration{ExternalEffects: adapters.Outbox}, relay{}, early)
	what, took, err := drain(t, trusted)
	if err != nil || !strings.HasPrefix(what, "drained instances [1] in ") || strings.Contains(what, "waited") || took >= harness.DefaultSendPace {
		t.Errorf("Drain without a declared delay took %s: %q, %v; want the drain alone, at once", took, what, err)
	}
}
