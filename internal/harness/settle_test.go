package harness_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/external"
	"github.com/harmless-dev/harmless/internal/harness"
)

// script is how a test's outbox relay sends each effect committed: delay
// after the commit, then again retry after each send that failed (with a
// new key when newKeys, as a relay that builds each request afresh does);
// and, when again is set, once more with a new key that long after the
// destination acknowledged it, as a relay that lost track of its row.
type script struct {
	delay, retry, again time.Duration
	newKeys             bool
}

// outboxed is an instance of a correct outbox but for its script: its
// delivery applies the effect in a transaction of its own and, once that
// committed, hands the event to its relay, which sends it over HTTP to the
// play's real destination. It has no Drain, like a relay that only polls.
type outboxed struct {
	env   adapters.Env
	pool  *pgxpool.Pool
	send  chan adapters.Event
	stop  context.CancelFunc
	relay sync.WaitGroup
}

func (o *outboxed) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if err := pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error { return o.env.Effect.Apply(ctx, tx, d) }); err != nil {
		return 0, err
	}
	o.send <- d.Event
	return adapters.Applied, nil
}

// Close stops the relay, leaving what it did not send, and closes the
// pool.
func (o *outboxed) Close(context.Context) error {
	o.stop()
	o.relay.Wait()
	o.pool.Close()
	return nil
}

// outboxAdapter returns an adapter of outboxed instances following s.
func outboxAdapter(t *testing.T, s script) adapters.Adapter {
	return adapters.Adapter{
		Name:     "outboxed",
		Declares: adapters.Declaration{ExternalEffects: adapters.Outbox},
		New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
			pool, err := pgxpool.New(ctx, env.DSN)
			if err != nil {
				return nil, err
			}
			// The relay outlives the construction's ctx: Close stops it.
			relayCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
			o := &outboxed{env: env, pool: pool, send: make(chan adapters.Event, 16), stop: stop}
			o.relay.Go(func() { relaySends(t, relayCtx, env.Destination, s, o.send) })
			return o, nil
		},
	}
}

// relaySends sends each event received on events as s says, until ctx
// ends; each event is sent by a goroutine of its own, as rows by a relay
// that keeps no order.
func relaySends(t *testing.T, ctx context.Context, url string, s script, events <-chan adapters.Event) {
	var sends sync.WaitGroup
	defer sends.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-events:
			sends.Go(func() { sendScripted(t, ctx, url, s, ev) })
		}
	}
}

func sendScripted(t *testing.T, ctx context.Context, url string, s script, ev adapters.Event) {
	sleep := func(d time.Duration) bool {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		}
	}
	key := external.Key(ev)
	for try := 1; ; try++ {
		if !sleep(map[bool]time.Duration{true: s.delay, false: s.retry}[try == 1]) {
			return
		}
		if s.newKeys {
			key = fmt.Sprintf("%s-try-%d", external.Key(ev), try)
		}
		err := external.Send(ctx, nil, url, key, ev)
		if err == nil {
			break
		}
		t.Logf("relay: send %s, try %d: %v", ev, try, err)
	}
	if s.again > 0 && sleep(s.again) {
		if err := external.Send(ctx, nil, url, external.Key(ev)+"-again", ev); err != nil && ctx.Err() == nil {
			t.Errorf("relay: send %s again: %v", ev, err)
		}
	}
}

// outboxPlay opens a play of an outboxed adapter following s, with its
// destination, and delivers evs to instance 1, each once; each must be
// Applied.
func outboxPlay(t *testing.T, s script, evs ...adapters.Event) *harness.Play {
	t.Helper()
	play := newPlay(t, startRun(t, ampleTimeout), outboxAdapter(t, s))
	if _, err := play.OpenDestination(t.Context()); err != nil {
		t.Fatalf("open the destination: %v", err)
	}
	for _, ev := range evs {
		if a := play.Deliver(t.Context(), 1, ev); !a.Acked() || a.Outcome != adapters.Applied {
			t.Fatalf("deliver %s: %s; want Applied", ev, a.Result())
		}
	}
	return play
}

// settled returns how long the destination had had no request when Drain
// returned, after checking that it processed each of evs want times.
func settled(t *testing.T, play *harness.Play, returned time.Time, want int, evs ...adapters.Event) time.Duration {
	t.Helper()
	d := play.Destination()
	for _, ev := range evs {
		if got := d.Processed(ev); got != want {
			t.Errorf("when Drain returned, the destination had processed %s %s; want %s", ev, harness.Times(got), harness.Times(want))
		}
	}
	recs := d.Records()
	if len(recs) == 0 {
		t.Fatal("the destination read no request")
	}
	return returned.Sub(recs[len(recs)-1].At)
}

// TestDrainEndsOnceNothingIsOwed: a relay without Drain that sends each
// effect 300 ms after its commit is judged about a second after its last
// request, once the ledger's effects have all been acknowledged, not after
// the default pace of 5 s.
func TestDrainEndsOnceNothingIsOwed(t *testing.T) {
	t.Parallel()
	evs := []adapters.Event{event("owed-1-" + randomHex(t, 4)), event("owed-2-" + randomHex(t, 4))}
	play := outboxPlay(t, script{delay: 300 * time.Millisecond}, evs...)
	what, took, err := drain(t, play)
	returned := time.Now()
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	quiet := settled(t, play, returned, 1, evs...)
	if quiet < time.Second || took >= harness.DefaultSendPace {
		t.Errorf("Drain took %s and returned %s after the last request; want at least the settle of 1s after it, and less than the default pace %s in all", took, quiet, harness.DefaultSendPace)
	}
	for _, want := range []string{"instances [1] cannot be drained, so waited until the destination had acknowledged the 2 effects committed, then had had no request for 1s (the longest the implementation was seen to wait before a send, after a commit or after an earlier request for the same effect: ", "; at least 1s)"} {
		if !strings.Contains(what, want) {
			t.Errorf("Drain said %q; want it to say %q", what, want)
		}
	}
}

// TestDrainWaitsForAnEffectStillOwed: an effect the relay sends 3 s after
// its commit is waited for, and the settle after it follows the relay's
// pace: the 3 s it took.
func TestDrainWaitsForAnEffectStillOwed(t *testing.T) {
	t.Parallel()
	ev := event("late-" + randomHex(t, 4))
	play := outboxPlay(t, script{delay: 3 * time.Second}, ev)
	what, _, err := drain(t, play)
	returned := time.Now()
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	// The relay's 3 s count from a moment before the delivery returned,
	// and the harness's from its return.
	if quiet := settled(t, play, returned, 1, ev); quiet < 2500*time.Millisecond || quiet >= harness.DefaultSendPace {
		t.Errorf("Drain returned %s after the relay's request; want about the 3s it took to send, short of the pace", quiet)
	}
	if want := "acknowledged the one effect committed, then had had no request for 3s (the longest the implementation was seen to wait before a send, after a commit or after an earlier request for the same effect: 3s)"; !strings.Contains(what, want) {
		t.Errorf("Drain said %q; want it to say %q", what, want)
	}
}

// TestDrainCatchesALateDuplicate: a relay that sends an effect again, with
// a new key, 1 s after the destination acknowledged it, is still watched
// when it does: it took 2 s to send the effect, and the settle follows
// that. The destination processed the effect twice, which
// exactly-once-at-destination fails.
func TestDrainCatchesALateDuplicate(t *testing.T) {
	t.Parallel()
	ev := event("twice-" + randomHex(t, 4))
	play := outboxPlay(t, script{delay: 2 * time.Second, again: time.Second}, ev)
	what, _, err := drain(t, play)
	returned := time.Now()
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	recs := play.Destination().Records()
	if len(recs) != 2 || recs[1].Key == recs[0].Key {
		t.Fatalf("when Drain returned, the destination had read %d requests (%+v); want the first and the duplicate with its new key", len(recs), recs)
	}
	settled(t, play, returned, 2, ev)
	if want := "acknowledged the one effect committed, then had had no request for"; !strings.Contains(what, want) {
		t.Errorf("Drain said %q; want it to say %q", what, want)
	}
}

// TestDrainWaitsOutARetryAfterADroppedAnswer: the destination processes
// the first request and drops its answer; the relay retries 3 s later with
// a new key. The effect stays owed until a request for it is answered for
// good, so the harness waits for the retry, however long after the first
// request it comes (within the pace), and sees the second effect.
func TestDrainWaitsOutARetryAfterADroppedAnswer(t *testing.T) {
	t.Parallel()
	ev := event("dropped-" + randomHex(t, 4))
	play := newPlay(t, startRun(t, ampleTimeout), outboxAdapter(t, script{delay: 50 * time.Millisecond, retry: 3 * time.Second, newKeys: true}))
	dest, err := play.OpenDestination(t.Context())
	if err != nil {
		t.Fatalf("open the destination: %v", err)
	}
	if _, err := dest.DropAfterProcess(ev, 1); err != nil {
		t.Fatal(err)
	}
	if a := play.Deliver(t.Context(), 1, ev); a.Outcome != adapters.Applied {
		t.Fatalf("deliver %s: %s; want Applied", ev, a.Result())
	}
	_, _, err = drain(t, play)
	returned := time.Now()
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if recs := dest.Records(); len(recs) != 2 || recs[1].Key == recs[0].Key {
		t.Fatalf("when Drain returned, the destination had read %d requests (%+v); want the dropped one and the retry with its new key", len(recs), recs)
	}
	settled(t, play, returned, 2, ev)
}

// TestDrainOfAPlayWithoutHistory: a play that keeps no history, as a
// soak's, knows no commit times, so the settle could never be shorter
// than the pace: Drain waits the pace without a request, as it did before
// it knew what was owed, and does not read the ledger for it.
func TestDrainOfAPlayWithoutHistory(t *testing.T) {
	t.Parallel()
	declares := adapters.Declaration{ExternalEffects: adapters.Outbox, MaxSendDelay: 300 * time.Millisecond}
	adapter := outboxAdapter(t, script{delay: 100 * time.Millisecond})
	adapter.Declares = declares
	run := startRun(t, ampleTimeout)
	play, err := run.NewPlayWith(t.Context(), adapter, harness.PlayOptions{NoHistory: true})
	if err != nil {
		t.Fatalf("new play: %v", err)
	}
	atEnd(t, "play "+play.Schema(), play.Close)
	if _, err := play.OpenDestination(t.Context()); err != nil {
		t.Fatalf("open the destination: %v", err)
	}
	ev := event("unhistoried-" + randomHex(t, 4))
	if a := play.Deliver(t.Context(), 1, ev); a.Outcome != adapters.Applied {
		t.Fatalf("deliver %s: %s; want Applied", ev, a.Result())
	}
	what, _, err := drain(t, play)
	returned := time.Now()
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if quiet, pace := settled(t, play, returned, 1, ev), harness.SendPace(declares); quiet < pace {
		t.Errorf("Drain returned %s after the relay's request; want the whole pace %s", quiet, pace)
	}
	if want := "so waited until the destination had had no request for 1.3s (the declared max_send_delay_s of 300ms and a margin): "; !strings.Contains(what, want) {
		t.Errorf("Drain said %q; want it to say %q", what, want)
	}
}
