package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/destination"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/shortdur"
)

// DefaultSendPace is the send pace of an implementation that declares no
// [adapters.Declaration.MaxSendDelay]: how long the destination must have
// had no request, while an effect is still owed to it, before the harness
// takes the sends to be done, and the longest settle once none is (see
// [Play.Drain]). It certifies a relay
// that polls its outbox every 3 s and retries a failed send on its next
// poll: the gaps between its requests are at most about 3 s, and 2 s more
// cover a poll that starts late on a loaded machine, its query and its
// connection.
const DefaultSendPace = 5 * time.Second

// A declared MaxSendDelay gets a margin of 1/sendMarginDivisor of itself,
// and at least minSendMargin: a relay that sleeps its declared delay still
// queries, connects and sends after it, late when the machine is loaded,
// and relays commonly add jitter in proportion to their interval.
const (
	sendMarginDivisor = 2
	minSendMargin     = time.Second
)

// quietBoundPaces is how many send paces the harness waits, at most, for
// a destination that keeps receiving requests to go quiet (the delivery
// timeout when that is longer). A relay that is done goes quiet one pace
// after its last send; one still retrying the few faults a play plans is
// done within a few paces. Ten bound a relay that sends forever, or
// retries what the destination keeps refusing, so that the play is judged
// in bounded time.
const quietBoundPaces = 10

// ErrStillSending marks a drain cut at its bound ([QuietBound]) while the
// destination was still receiving requests.
var ErrStillSending = errors.New("the destination was still receiving requests")

// SendPace is how long the destination must have had no request, while an
// effect is still owed to it, before the harness takes an implementation's
// sends to be done, and the longest settle once none is: its declared
// MaxSendDelay and a margin (half of it, at least a second), else
// [DefaultSendPace].
func SendPace(d adapters.Declaration) time.Duration {
	if d.MaxSendDelay <= 0 {
		return DefaultSendPace
	}
	return addSat(d.MaxSendDelay, max(d.MaxSendDelay/sendMarginDivisor, minSendMargin))
}

// QuietBound is the longest [Play.Drain] waits for the destination to go
// quiet: quietBoundPaces send paces, or the delivery timeout when that is
// longer.
func QuietBound(d adapters.Declaration, timeout time.Duration) time.Duration {
	return max(timeout, mulSat(SendPace(d), quietBoundPaces))
}

// DrainLimit is the longest [Play.Drain] takes for a play of at most
// instances instances: a guarded Drain call for each, then the wait for
// the destination to go quiet. Plays budget their drains with it.
func DrainLimit(d adapters.Declaration, timeout time.Duration, instances int) time.Duration {
	return addSat(mulSat(CallSlot(max(timeout, SendPace(d))), instances), QuietBound(d, timeout))
}

// longestWait is where addSat and mulSat stop: ten years, which no run
// waits, and far enough below the longest time.Duration that a caller may
// add a few of them, and a budget, without overflow. A declared delay may
// be as long as a Duration holds.
const longestWait = 10 * 365 * 24 * time.Hour

// addSat and mulSat are + and * of non-negative durations that stop at
// longestWait.
func addSat(a, b time.Duration) time.Duration {
	if a >= longestWait || b >= longestWait-a {
		return longestWait
	}
	return a + b
}

func mulSat(a time.Duration, n int) time.Duration {
	if n > 0 && a >= longestWait/time.Duration(n) {
		return longestWait
	}
	return a * time.Duration(n)
}

// Destination is a play's external destination: a [destination.Server]
// whose fault methods also record the fault, so that the run counts its
// firings (kinds "dest:<action>"). The play starts it when the adapter
// declares external effects and closes it with the play.
type Destination struct {
	server *destination.Server
	play   *Play
}

// OpenDestination starts the play's external destination and returns it;
// every instance built from then on gets its URL as
// [adapters.Env.Destination]. Only the plays of the external-effect
// fixture open one: elsewhere Env.Destination is "" and the implementation
// makes no external effect, so that its relay's connections cannot take
// the faults other fixtures aim at an instance's connections (a proxy cut
// after the first statement, at COMMIT). Call it before any instance is
// built; the play closes the destination.
func (s *Play) OpenDestination(ctx context.Context) (*Destination, error) {
	if s.adapter.Declares.ExternalEffects == adapters.NoExternalEffects {
		return nil, errors.New("the adapter declares no external effects: it has no destination")
	}
	s.mu.Lock()
	built, open := len(s.instances) > 0, s.dest != nil
	s.mu.Unlock()
	switch {
	case open:
		return nil, errors.New("the play's destination is open already")
	case built:
		return nil, errors.New("an instance was built before the destination opened: it has no URL")
	}
	server, err := destination.Start(ctx, nil)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.dest = &Destination{server: server, play: s}
	s.mu.Unlock()
	return s.dest, nil
}

// Destination returns the play's destination; nil until OpenDestination.
func (s *Play) Destination() *Destination {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dest
}

// URL is the destination's base URL, handed to every instance as
// [adapters.Env.Destination].
func (d *Destination) URL() string { return d.server.URL() }

// Fail plans a 500 or 503 answer (see [destination.Server.Fail]).
func (d *Destination) Fail(ev adapters.Event, attempt, status int) (*destination.Fault, error) {
	return d.recorded(d.server.Fail(ev, attempt, status))
}

// DropAfterProcess plans the external ambiguous outcome (see
// [destination.Server.DropAfterProcess]).
func (d *Destination) DropAfterProcess(ev adapters.Event, attempt int) (*destination.Fault, error) {
	return d.recorded(d.server.DropAfterProcess(ev, attempt))
}

// Slow plans a slow answer (see [destination.Server.Slow]).
func (d *Destination) Slow(ev adapters.Event, attempt int, delay time.Duration) (*destination.Fault, error) {
	return d.recorded(d.server.Slow(ev, attempt, delay))
}

// Hold plans a held request (see [destination.Server.Hold]).
func (d *Destination) Hold(ev adapters.Event, attempt int) (*destination.Fault, error) {
	return d.recorded(d.server.Hold(ev, attempt))
}

// Down takes the destination down until Up (see [destination.Server.Down]).
func (d *Destination) Down() (*destination.Fault, error) { return d.recorded(d.server.Down()) }

// Up ends the outage.
func (d *Destination) Up() { d.server.Up() }

// ProcessedTotal returns how many requests the destination processed.
func (d *Destination) ProcessedTotal() int { return d.server.ProcessedTotal() }

// ForgetRequests keeps only the destination's counts from now on (see
// [destination.Server.ForgetRequests]).
func (d *Destination) ForgetRequests() { d.server.ForgetRequests() }

// Records returns every request the destination read, and every connection
// it refused, in arrival order.
func (d *Destination) Records() []destination.Record { return d.server.Requests() }

// Processed returns how many times the destination processed ev's identity.
func (d *Destination) Processed(ev adapters.Event) int { return d.server.Processed(ev) }

func (d *Destination) recorded(f *destination.Fault, err error) (*destination.Fault, error) {
	if err != nil {
		return nil, err
	}
	d.play.record(f)
	return f, nil
}

// aborter is implemented by instances that can be stopped abruptly, as a
// process is killed: exec instances (SIGKILL of every process).
type aborter interface {
	Abort(ctx context.Context) error
}

// Stop stops instance n abruptly, as a crash of its process would, and
// forgets it, so that [Play.Instance] with another number builds a new
// instance on the same schema. An instance with an Abort(ctx) method is
// aborted; any other is closed, which for an implementation with external
// effects must not drain them (docs/external-effects.md). It returns how
// the instance was stopped, "aborted" or "closed".
func (s *Play) Stop(ctx context.Context, n int) (string, error) {
	s.mu.Lock()
	impl, ok := s.instances[n]
	delete(s.instances, n)
	if r, reports := impl.(crashReporter); reports {
		if s.stoppedCrashes == nil {
			s.stoppedCrashes = map[int][]string{}
		}
		s.stoppedCrashes[n] = append(s.stoppedCrashes[n], r.Crashes()...)
	}
	s.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("stop instance %d: no such instance", n)
	}
	if a, ok := impl.(aborter); ok {
		_, err := guard(ctx, s.run.opts.DeliveryTimeout, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, a.Abort(ctx)
		})
		if err != nil {
			return "aborted", fmt.Errorf("abort instance %d: %w", n, err)
		}
		return "aborted", nil
	}
	if err := guardClose(ctx, impl, s.run.opts.DeliveryTimeout); err != nil {
		return "closed", fmt.Errorf("close instance %d: %w", n, err)
	}
	return "closed", nil
}

// Drain waits until the play's instances have made the external effects
// committed so far, at the implementation's pace ([SendPace]). It calls
// Drain on every instance that implements [adapters.Drainer], each bounded
// by the delivery timeout or the send pace, whichever is longer. When every
// instance was drained and the adapter declares no MaxSendDelay, that is
// all. Otherwise (an instance cannot be drained: no Drainer, or an error
// wrapping errors.ErrUnsupported, as from an exec child without drain;
// there is no instance; or the adapter declares MaxSendDelay, and a Drain
// that returns early must not make the harness judge before the declared
// pace) it waits on the destination, knowing from the ledger what is owed
// to it ([Play.settle]): until every effect committed has been
// acknowledged there and the destination has then had no request for a
// settle bounded by what it saw of the implementation's pace, or, while an
// effect is still owed, until it has had no request for the whole send
// pace, counted from the start of that wait: a relay that never sends
// costs one pace. A destination that keeps receiving requests is waited
// for at most [QuietBound], then Drain returns an error wrapping
// [ErrStillSending]. It returns what it did and for how long, for the
// evidence.
func (s *Play) Drain(ctx context.Context) (string, error) {
	if s.Destination() == nil {
		return "", errors.New("the play has no destination: OpenDestination was not called")
	}
	ctx, release, ok := s.bounded(ctx)
	defer release()
	if !ok {
		return "", fmt.Errorf("drain: %w", ErrBudgetExpired)
	}
	declared := s.adapter.Declares
	pace := SendPace(declared)
	s.mu.Lock()
	ns := make([]int, 0, len(s.instances))
	for n := range s.instances {
		ns = append(ns, n)
	}
	instances := s.instances
	s.mu.Unlock()
	slices.Sort(ns)
	start := time.Now()
	var drained, undrainable []int
	for _, n := range ns {
		d, ok := instances[n].(adapters.Drainer)
		if !ok {
			undrainable = append(undrainable, n)
			continue
		}
		_, err := guard(ctx, max(s.run.opts.DeliveryTimeout, pace), func(ctx context.Context) (struct{}, error) {
			return struct{}{}, d.Drain(ctx)
		})
		switch {
		case errors.Is(err, errors.ErrUnsupported):
			undrainable = append(undrainable, n)
		case err != nil:
			return fmt.Sprintf("drained instances %v in %s", drained, elapsed(start)), fmt.Errorf("drain instance %d: %w", n, err)
		default:
			drained = append(drained, n)
		}
	}
	var what []string
	if len(drained) > 0 {
		what = append(what, fmt.Sprintf("drained instances %v in %s", drained, elapsed(start)))
	}
	switch {
	case len(ns) == 0:
		what = append(what, "no instance to drain")
	case len(undrainable) > 0:
		what = append(what, fmt.Sprintf("instances %v cannot be drained", undrainable))
	case declared.MaxSendDelay > 0:
		what = append(what, "the declared send pace holds after a drain")
	default:
		return strings.Join(what, ", "), nil
	}
	paceWhy := "the default send pace; declare max_send_delay_s to change it"
	if declared.MaxSendDelay > 0 {
		paceWhy = fmt.Sprintf("the declared max_send_delay_s of %s and a margin", shortdur.Format(declared.MaxSendDelay))
	}
	bound := QuietBound(declared, s.run.opts.DeliveryTimeout)
	waited := time.Now()
	qctx, cancel := context.WithTimeoutCause(ctx, bound, ErrStillSending)
	defer cancel()
	st, err := s.settle(qctx, pace)
	took := elapsed(waited)
	owed := ""
	if st.known {
		owed = ", with " + owedState(st)
	}
	switch {
	case err == nil && st.Settled:
		what = append(what, fmt.Sprintf("so waited until the destination had acknowledged %s, then had had no request for %s (%s): %s in all",
			owedEffects(st.Expected), shortdur.Format(rounded(st.Quiet)), settleWhy(st, pace, paceWhy), took))
		return strings.Join(what, ", "), nil
	case err == nil:
		what = append(what, fmt.Sprintf("so waited until the destination had had no request for %s (%s)%s: %s in all", shortdur.Format(pace), paceWhy, owed, took))
		return strings.Join(what, ", "), nil
	case ctx.Err() == nil && errors.Is(context.Cause(qctx), ErrStillSending):
		what = append(what, fmt.Sprintf("so waited for the destination to acknowledge what was owed and go quiet, for no request for %s at most (%s), and stopped after %s, the longest the harness waits (%d times that pace, or the delivery timeout when longer): the destination was still receiving requests%s",
			shortdur.Format(pace), paceWhy, took, quietBoundPaces, owed))
		return strings.Join(what, ", "), fmt.Errorf("drain: %w %s after the harness began waiting for %s without one", ErrStillSending, took, shortdur.Format(pace))
	default:
		what = append(what, fmt.Sprintf("so waited for the destination to acknowledge what was owed and go quiet, for no request for %s at most (%s), cut short after %s%s", shortdur.Format(pace), paceWhy, took, owed))
		return strings.Join(what, ", "), err
	}
}

// minSettle is the shortest settle [Play.settle] waits once nothing is
// owed: a relay woken by its commit sends at once and shows no delay at
// all, while its next poll, which is when it would send an effect again,
// may come a moment later (the reference's relay polls every 500 ms); and
// a second covers the scheduling of a loaded machine, as minSendMargin
// does.
const minSettle = time.Second

// settle waits on the play's destination until nothing is owed to it and
// it has settled, or until it has had no request for pace while something
// still is (see [destination.Server.Settle]). What is owed is read from
// the ledger, the harness's own record of the effects committed, and from
// the history (an event acknowledged Applied is owed its effect, as the
// rules judge it): each such event is owed one effect at the destination,
// committed when the delivery that applied it ended. An effect is owed
// until it has been processed and the last request for it answered for
// good: a request that merely arrived, and was dropped or answered 5xx,
// will be retried by a correct relay, and the retry is what the
// dropped-answer play judges (a new key there is a second effect).
//
// Once every effect owed has been acknowledged, the destination is still
// watched for a settle: the longest the implementation was seen to wait
// before a send (from a commit to the first request for its effect, from
// the end of a request to the next for the same effect), at least
// [minSettle] and at most pace, from the last request. The rules that
// judge requests made after an effect was acknowledged need it:
// exactly-once-at-destination, stable-key and no-new-key-for-duplicates
// fail on a second send of an effect already made, which a relay that
// lost track of its row makes at its own pace, a poll or a backoff after
// the first. How long it waited before the sends it made is the evidence
// the play gives of that pace. Waiting the whole pace after every play, as
// the harness did before it knew what was owed, made a relay that sends
// within a second cost five seconds a play, most of a certification. What
// the settle gives up is a resend later than anything the relay was seen
// to wait in the play (and within the pace, where the old wait caught
// it): a relay with a pace the play could not observe, which a drained
// instance is too, whose Drain the harness trusts without any wait.
//
// Effects committed while it waits (a delivery whose call timed out and
// committed later) are found when nothing else is owed: the ledger is read
// again, and any new effect is waited for in turn.
//
// A play that keeps no history (a soak's) knows no commit times, so the
// destination could never settle sooner than the pace: it waits as one
// that does not know what is owed ([destination.Server.Quiet]), and spares
// reading a ledger of millions of effects; what it returns is not known.
func (s *Play) settle(ctx context.Context, pace time.Duration) (settlement, error) {
	server := s.dest.server
	if s.opts.NoHistory {
		return settlement{Settlement: destination.Settlement{Quiet: pace}}, server.Quiet(ctx, pace)
	}
	st := settlement{known: true}
	var seq int64
	for first := true; ; first = false {
		owed, next, err := s.owed(ctx, seq)
		if err != nil {
			return st, fmt.Errorf("the effects owed to the destination: %w", err)
		}
		seq = next
		if added := server.Expect(owed); added == 0 && !first {
			return st, nil
		}
		if st.Settlement, err = server.Settle(ctx, pace, minSettle); err != nil || !st.Settled {
			return st, err
		}
	}
}

// settlement is how [Play.settle] ended; known tells that it knew what was
// owed.
type settlement struct {
	destination.Settlement
	known bool
}

// owed returns the identities owed an effect at the destination, each with
// when its effect was committed (the end of the delivery attempt that
// wrote it; zero when the play keeps no history), from the effects in the
// ledger with a seq above after and the deliveries acknowledged Applied;
// and the ledger's last seq.
func (s *Play) owed(ctx context.Context, after int64) (map[destination.Identity]time.Time, int64, error) {
	entries, err := ledger.After(ctx, s.run.admin, s.schema, after)
	if err != nil {
		return nil, after, err
	}
	type attempt struct {
		id destination.Identity
		n  int
	}
	s.mu.Lock()
	ended := make(map[attempt]time.Time, len(s.history))
	owed := map[destination.Identity]time.Time{}
	for _, a := range s.history {
		id := destination.IdentityOf(a.Delivery.Event)
		ended[attempt{id, a.Delivery.Attempt}] = s.started.Add(a.Ended)
		if a.Acked() && a.Outcome == adapters.Applied {
			owed[id] = earliest(owed[id], s.started.Add(a.Ended))
		}
	}
	s.mu.Unlock()
	for _, e := range entries {
		id := destination.Identity{Namespace: e.Namespace, ID: e.ID}
		owed[id] = earliest(owed[id], ended[attempt{id, e.Attempt}])
		after = e.Seq
	}
	return owed, after, nil
}

// earliest is the earlier of two times, a zero time standing for none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// owedEffects says how many effects were owed, for a message.
func owedEffects(n int) string {
	switch n {
	case 0:
		return "no effect, none having committed"
	case 1:
		return "the one effect committed"
	}
	return fmt.Sprintf("the %d effects committed", n)
}

// settleWhy says why a settle lasted what it did, for a message.
func settleWhy(st settlement, pace time.Duration, paceWhy string) string {
	why := fmt.Sprintf("the longest the implementation was seen to wait before a send, after a commit or after an earlier request for the same effect: %s", shortdur.Format(rounded(st.Observed)))
	switch {
	case st.Quiet == pace:
		why += fmt.Sprintf("; at most the send pace of %s, %s", shortdur.Format(pace), paceWhy)
	case st.Quiet > st.Observed:
		why += fmt.Sprintf("; at least %s", shortdur.Format(minSettle))
	}
	return why
}

// owedState says what was owed when a wait ended, for a message.
func owedState(st settlement) string {
	switch {
	case st.Expected == 0:
		return "no effect committed"
	case st.Owed == 0 && !st.Settled:
		return owedEffects(st.Expected) + " acknowledged, but when they committed unknown"
	case st.Owed == 0:
		return owedEffects(st.Expected) + " acknowledged"
	case st.Expected == 1:
		return "the one effect committed not acknowledged"
	}
	return fmt.Sprintf("%d of the %d effects committed not acknowledged", st.Owed, st.Expected)
}

// elapsed is the time since start, rounded for a message.
func elapsed(start time.Time) time.Duration {
	return rounded(time.Since(start))
}

// rounded is d rounded for a message.
func rounded(d time.Duration) time.Duration {
	return d.Round(100 * time.Millisecond)
}

// destinationURL is the destination's URL, "" without one.
func (s *Play) destinationURL() string {
	if s.dest == nil {
		return ""
	}
	return s.dest.URL()
}

// closeDestination closes the play's destination, after its instances.
func (s *Play) closeDestination() error {
	if s.dest == nil {
		return nil
	}
	return s.dest.server.Close()
}
