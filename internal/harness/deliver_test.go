package harness_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/harness"
)

// attemptNumbers lists the attempt numbers of attempts, in order.
func attemptNumbers(attempts []harness.Attempt) []int {
	nums := make([]int, len(attempts))
	for i, a := range attempts {
		nums[i] = a.Delivery.Attempt
	}
	return nums
}

func TestDeliverSurvivesAHungImplementation(t *testing.T) {
	t.Parallel()
	h := newHold(t)
	adapter := delivering("hang", func(_ context.Context, d adapters.Delivery) (adapters.Outcome, error) {
		if d.ID == "hang" {
			h.block() // ignores ctx
		}
		return adapters.Applied, nil
	})
	play := newPlay(t, startRun(t, shortTimeout), adapter)

	hung := event("hang")
	a := deliverBounded(t, play, 1, hung, patience)
	if !errors.Is(a.Err, harness.ErrHung) {
		t.Fatalf("Err = %v; want it to wrap ErrHung", a.Err)
	}
	if a.Acked() || a.Terminal() {
		t.Errorf("a hung delivery is acked (%v) or terminal (%v); a broker would redeliver it", a.Acked(), a.Terminal())
	}
	for _, want := range []string{"hung", hung.String(), "attempt 1", shortTimeout.String()} {
		if !strings.Contains(a.Result(), want) {
			t.Errorf("Result() = %q; want it to mention %q", a.Result(), want)
		}
	}

	// The run goes on: other events are delivered, the hung event is
	// delivered again with the next attempt number, and all is recorded.
	if ok := deliverBounded(t, play, 1, event("fine"), patience); !ok.Acked() || ok.Outcome != adapters.Applied {
		t.Errorf("a delivery after the hang ended %s; want Applied", ok.Result())
	}
	if again := deliverBounded(t, play, 2, hung, patience); !errors.Is(again.Err, harness.ErrHung) || again.Delivery.Attempt != 2 {
		t.Errorf("redelivery of the hung event: attempt %d ended %s; want attempt 2, hung", again.Delivery.Attempt, again.Result())
	}
	if got := attemptNumbers(play.History(hung)); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("history of the hung event has attempts %v; want [1 2]", got)
	}
}

func TestDeliverHonouringItsContextIsNotHung(t *testing.T) {
	t.Parallel()
	play := newPlay(t, startRun(t, shortTimeout), delivering("slow", func(ctx context.Context, _ adapters.Delivery) (adapters.Outcome, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}))
	a := deliverBounded(t, play, 1, event("slow"), patience)
	if !errors.Is(a.Err, context.DeadlineExceeded) || errors.Is(a.Err, harness.ErrHung) {
		t.Errorf("Err = %v; want context.DeadlineExceeded, not ErrHung: the implementation returned once its context ended", a.Err)
	}
}

func TestDeliverSurvivesAPanic(t *testing.T) {
	t.Parallel()
	play := newPlay(t, startRun(t, shortTimeout), delivering("panic", func(_ context.Context, d adapters.Delivery) (adapters.Outcome, error) {
		switch d.ID {
		case "string":
			panic("kaboom 42")
		case "error":
			panic(fmt.Errorf("wrapped %w", adapters.ErrInvalidInput))
		case "nil":
			panic(nil)
		}
		return adapters.Applied, nil
	}))
	for _, tc := range []struct{ id, want string }{
		{"string", "kaboom 42"},
		{"error", "wrapped invalid input"},
		{"nil", "panic called with nil argument"},
	} {
		t.Run(tc.id, func(t *testing.T) {
			a := deliverBounded(t, play, 1, event(tc.id), patience)
			if !errors.Is(a.Err, harness.ErrPanicked) {
				t.Fatalf("Err = %v; want it to wrap ErrPanicked", a.Err)
			}
			if !strings.Contains(a.Err.Error(), tc.want) || !strings.Contains(a.Result(), tc.want) {
				t.Errorf("Err = %q, Result() = %q; want both to mention the panic value %q", a.Err, a.Result(), tc.want)
			}
			if !strings.Contains(a.Err.Error(), "goroutine") {
				t.Errorf("Err does not carry the stack:\n%v", a.Err)
			}
			if strings.Contains(a.Result(), "\n") {
				t.Errorf("Result() has more than one line: %q", a.Result())
			}
			// A panic value that is an error wrapping ErrInvalidInput must not
			// pass for a clean refusal of the input.
			if a.Terminal() {
				t.Errorf("a panicked delivery is terminal; a broker would redeliver it")
			}
		})
	}
	if a := deliverBounded(t, play, 1, event("fine"), patience); !a.Acked() {
		t.Errorf("a delivery after the panics ended %s; want Applied", a.Result())
	}
}

func TestDeliverSurvivesGoexit(t *testing.T) {
	t.Parallel()
	play := newPlay(t, startRun(t, shortTimeout), delivering("goexit", func(context.Context, adapters.Delivery) (adapters.Outcome, error) {
		runtime.Goexit() // what t.FailNow does inside a test's adapter
		return adapters.Applied, nil
	}))
	a := deliverBounded(t, play, 1, event("goexit"), patience)
	if !errors.Is(a.Err, harness.ErrPanicked) || !strings.Contains(a.Result(), "runtime.Goexit") {
		t.Errorf("Err = %v; want it to wrap ErrPanicked and say the call ran runtime.Goexit", a.Err)
	}
	if errors.Is(a.Err, harness.ErrBadOutcome) {
		t.Errorf("Err = %v; the implementation returned no outcome at all", a.Err)
	}
}

func TestDeliverRejectsInvalidOutcomes(t *testing.T) {
	t.Parallel()
	errNope := errors.New("nope")
	play := newPlay(t, startRun(t, shortTimeout), delivering("outcomes", func(_ context.Context, d adapters.Delivery) (adapters.Outcome, error) {
		n, err := strconv.Atoi(string(d.Payload[1:])) // payload "o<n>" or "e<n>"
		if err != nil {
			return 0, err
		}
		o := adapters.Outcome(n)
		if d.Payload[0] == 'e' {
			return o, errNope
		}
		return o, nil
	}))
	ev := func(payload string) adapters.Event {
		return adapters.Event{Namespace: "outcomes", ID: payload, Payload: []byte(payload)}
	}
	for _, o := range []adapters.Outcome{0, 99, -1, 4} {
		a := deliverBounded(t, play, 1, ev(fmt.Sprintf("o%d", o)), patience)
		if !errors.Is(a.Err, harness.ErrBadOutcome) || !strings.Contains(a.Result(), o.String()) {
			t.Errorf("%s with a nil error: Err = %v; want ErrBadOutcome naming %s", o, a.Err, o)
		}
		if a.Terminal() {
			t.Errorf("%s with a nil error is terminal; a broker would redeliver it", o)
		}
	}
	// With an error the outcome is meaningless: the error is what counts.
	if a := deliverBounded(t, play, 1, ev("e99"), patience); !errors.Is(a.Err, errNope) || errors.Is(a.Err, harness.ErrBadOutcome) {
		t.Errorf("Outcome(99) with an error: Err = %v; want the implementation's error", a.Err)
	}
	for _, o := range []adapters.Outcome{adapters.Applied, adapters.Duplicate, adapters.Rejected} {
		if a := deliverBounded(t, play, 1, ev(fmt.Sprintf("o%d", o)), patience); !a.Acked() || a.Outcome != o {
			t.Errorf("%s: ended %s", o, a.Result())
		}
	}
}

func TestDeliverSurvivesAMisbehavingFactory(t *testing.T) {
	t.Parallel()
	errNoDB := errors.New("no database for you")
	h := newHold(t)
	run := startRun(t, shortTimeout)
	for _, tc := range []struct {
		name  string
		build func() (adapters.Implementation, error)
		is    error
		want  string
	}{
		{"error", func() (adapters.Implementation, error) { return nil, errNoDB }, errNoDB, "no database for you"},
		{"nil", func() (adapters.Implementation, error) { return nil, nil }, nil, "nil implementation and a nil error"},
		{"panic", func() (adapters.Implementation, error) { panic("factory kaboom") }, harness.ErrPanicked, "factory kaboom"},
		{"hang", func() (adapters.Implementation, error) { h.block(); return fake{}, nil }, harness.ErrHung, "hung"},
		{"goexit", func() (adapters.Implementation, error) { runtime.Goexit(); return fake{}, nil }, harness.ErrPanicked, "runtime.Goexit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The factory misbehaves on its first call only.
			var calls atomic.Int64
			name := "factory-" + tc.name
			play := newPlay(t, run, adapters.Adapter{Name: name, New: func(context.Context, adapters.Env) (adapters.Implementation, error) {
				if calls.Add(1) == 1 {
					return tc.build()
				}
				return fake{}, nil
			}})
			ev := event("1")
			a := deliverBounded(t, play, 1, ev, patience)
			if a.Err == nil {
				t.Fatalf("delivery through a failed factory ended %s", a.Result())
			}
			if tc.is != nil && !errors.Is(a.Err, tc.is) {
				t.Errorf("Err = %v; want it to wrap %v", a.Err, tc.is)
			}
			for _, want := range []string{tc.want, "build instance 1 of " + name} {
				if !strings.Contains(a.Result(), want) {
					t.Errorf("Result() = %q; want it to mention %q", a.Result(), want)
				}
			}
			if a.Terminal() {
				t.Errorf("a delivery that never reached the implementation is terminal")
			}
			// The failure is not cached: the next delivery builds the
			// instance again, and it works.
			if b := deliverBounded(t, play, 1, ev, patience); !b.Acked() || b.Delivery.Attempt != 2 {
				t.Errorf("the next delivery: attempt %d ended %s; want attempt 2, Applied", b.Delivery.Attempt, b.Result())
			}
			if got := attemptNumbers(play.History(ev)); !slices.Equal(got, []int{1, 2}) {
				t.Errorf("history has attempts %v; want [1 2]", got)
			}
			if _, err := play.Instance(t.Context(), 1); err != nil || calls.Load() != 2 {
				t.Errorf("Instance(1) = %v after %d factory calls; want the instance built by call 2", err, calls.Load())
			}
		})
	}
}

func TestAFailingFactoryIsCalledForEveryDelivery(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	play := newPlay(t, startRunOpts(t, harness.Options{DeliveryTimeout: shortTimeout, RedeliveryPatience: shortPatience}), adapters.Adapter{Name: "never", New: func(context.Context, adapters.Env) (adapters.Implementation, error) {
		calls.Add(1)
		return nil, errors.New("still no database")
	}})
	attempts := play.DeliverUntilTerminal(t.Context(), 1, event("1"))
	if len(attempts) < 3 || attempts[len(attempts)-1].GaveUp == "" {
		t.Fatalf("%d attempts, the last %+v; want redeliveries until the broker gave up", len(attempts), attempts[len(attempts)-1])
	}
	if calls.Load() != int64(len(attempts)) {
		t.Errorf("the factory was called %d times; want once per delivery, %d", calls.Load(), len(attempts))
	}
}

func TestPlayCloseSurvivesAMisbehavingClose(t *testing.T) {
	t.Parallel()
	h := newHold(t)
	run := startRun(t, shortTimeout)
	errClose := errors.New("close failed")
	for _, tc := range []struct {
		name  string
		close func(context.Context) error
		is    error
	}{
		{"error", func(context.Context) error { return errClose }, errClose},
		{"panic", func(context.Context) error { panic("close kaboom") }, harness.ErrPanicked},
		{"hang", func(context.Context) error { h.block(); return nil }, harness.ErrHung},
		{"goexit", func(context.Context) error { runtime.Goexit(); return nil }, harness.ErrPanicked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			play := newPlay(t, run, adapterOf("close-"+tc.name, fake{close: tc.close}))
			if _, err := play.Instance(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- play.Close(t.Context()) }()
			var err error
			select {
			case err = <-done:
			case <-t.Context().Done():
				t.Fatal("test context ended")
			case <-time.After(patience):
				t.Fatalf("Play.Close did not return within %s", patience)
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), "close instance 1") {
				t.Errorf("Close = %v; want it to wrap %v and name the instance", err, tc.is)
			}
			if schemaExists(t, run.Admin(), play.Schema()) {
				t.Errorf("schema %s survived a misbehaving Close", play.Schema())
			}
		})
	}
}

func TestDeliverUntilTerminal(t *testing.T) {
	t.Parallel()
	errTransient := errors.New("transient")
	play := newPlay(t, startRunOpts(t, harness.Options{DeliveryTimeout: shortTimeout, RedeliveryPatience: shortPatience}), delivering("scripted", func(_ context.Context, d adapters.Delivery) (adapters.Outcome, error) {
		switch {
		case d.ID == "ack-on-3" && d.Attempt < 3:
			return 0, errTransient
		case d.ID == "ack-on-3":
			return adapters.Applied, nil
		case d.ID == "invalid":
			return 0, fmt.Errorf("empty payload: %w", adapters.ErrInvalidInput)
		case d.ID == "conflict":
			return 0, fmt.Errorf("claimed with another payload: %w", adapters.ErrPayloadConflict)
		case d.ID == "rejected":
			return adapters.Rejected, nil
		}
		return 0, errTransient
	}))
	for _, tc := range []struct {
		id   string
		want int
		last func(harness.Attempt) bool
	}{
		{"ack-on-3", 3, func(a harness.Attempt) bool { return a.Acked() && a.Outcome == adapters.Applied }},
		{"invalid", 1, func(a harness.Attempt) bool { return errors.Is(a.Err, adapters.ErrInvalidInput) && a.Terminal() }},
		{"conflict", 1, func(a harness.Attempt) bool { return errors.Is(a.Err, adapters.ErrPayloadConflict) && a.Terminal() }},
		{"rejected", 1, func(a harness.Attempt) bool { return a.Acked() && a.Outcome == adapters.Rejected }},
		// -1: as many as the broker's patience allows, at least 3.
		{"never", -1, func(a harness.Attempt) bool { return errors.Is(a.Err, errTransient) && !a.Terminal() && a.GaveUp != "" }},
	} {
		t.Run(tc.id, func(t *testing.T) {
			attempts := play.DeliverUntilTerminal(t.Context(), 1, event(tc.id))
			n := tc.want
			if n < 0 {
				n = max(len(attempts), 3)
			}
			want := make([]int, n)
			for i := range want {
				want[i] = i + 1
			}
			if got := attemptNumbers(attempts); !slices.Equal(got, want) {
				t.Errorf("attempts %v; want %v", got, want)
			}
			if last := attempts[len(attempts)-1]; !tc.last(last) {
				t.Errorf("the last attempt ended %s", last.Result())
			}
		})
	}
}

// TestRedeliveryWaitsForTheEventsOtherDeliveries: as a broker hands a
// message it handed out to nobody else until that consumer is done with it,
// DeliverUntilTerminal redelivers only once no other delivery of the event
// is in flight. An implementation that fails fast while another delivery
// holds the event's lock (a short lock_timeout) is redelivered after that
// delivery ended, not while it still holds the lock.
func TestRedeliveryWaitsForTheEventsOtherDeliveries(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	failedFast := make(chan struct{}, 1)
	var holding atomic.Bool
	play := newPlay(t, startRun(t, ampleTimeout), delivering("lock-timeout", func(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
		switch {
		case d.Attempt == 1: // holds the event, as a claim that sleeps
			holding.Store(true)
			defer holding.Store(false)
			select {
			case <-release:
				return adapters.Applied, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		case holding.Load():
			select {
			case failedFast <- struct{}{}:
			default:
			}
			return 0, errors.New("canceling statement due to lock timeout (SQLSTATE 55P03)")
		}
		return adapters.Duplicate, nil
	}))
	ev := event("held")
	first := make(chan harness.Attempt, 1)
	go func() { first <- play.Deliver(t.Context(), 1, ev) }()
	// Attempt 1 holds the event before the redeliveries start.
	if !poll(patience, holding.Load) {
		t.Fatal("attempt 1 never started")
	}
	redelivered := make(chan []harness.Attempt, 1)
	go func() { redelivered <- play.DeliverUntilTerminal(t.Context(), 2, ev) }()
	<-failedFast
	// A redelivery that did not wait would use up its tries while attempt
	// 1 holds the event; give it the chance, then let attempt 1 end.
	var attempts []harness.Attempt
	select {
	case attempts = <-redelivered:
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	held := <-first
	if attempts == nil {
		attempts = <-redelivered
	}
	if got := attemptNumbers(attempts); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("redelivery attempts %v; want [2 3]: one that fails fast, then one after attempt 1 ended", got)
	}
	if attempts[1].Started < held.Ended {
		t.Errorf("attempt 3 started at %s, before attempt 1 (holding the event) ended at %s", attempts[1].Started, held.Ended)
	}
	if last := attempts[1]; !last.Acked() || last.Outcome != adapters.Duplicate {
		t.Errorf("attempt 3 ended %s; want Duplicate", last.Result())
	}
}

func TestDeliverUntilTerminalStopsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	play := newPlay(t, startRun(t, shortTimeout), delivering("cancel", func(_ context.Context, d adapters.Delivery) (adapters.Outcome, error) {
		if d.Attempt == 2 {
			cancel() // the broker shuts down
		}
		return 0, errors.New("not yet")
	}))
	if got := attemptNumbers(play.DeliverUntilTerminal(ctx, 1, event("1"))); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("attempts %v; want [1 2]: no redelivery once the context ended", got)
	}
}

func TestAttemptNumbersArePerEvent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string][]int{}
	play := newPlay(t, startRun(t, shortTimeout), delivering("count", func(_ context.Context, d adapters.Delivery) (adapters.Outcome, error) {
		mu.Lock()
		defer mu.Unlock()
		seen[d.Event.String()] = append(seen[d.Event.String()], d.Attempt)
		return adapters.Applied, nil
	}))
	a := adapters.Event{Namespace: "x", ID: "1"}
	b := adapters.Event{Namespace: "x", ID: "2"}
	c := adapters.Event{Namespace: "y", ID: "1"} // same id, other namespace: another event
	for i, ev := range []adapters.Event{a, b, a, c, a, b} {
		play.Deliver(t.Context(), 1+i%2, ev)
	}
	for _, tc := range []struct {
		ev   adapters.Event
		want []int
	}{{a, []int{1, 2, 3}}, {b, []int{1, 2}}, {c, []int{1}}} {
		ev, want := tc.ev, tc.want
		if got := attemptNumbers(play.History(ev)); !slices.Equal(got, want) {
			t.Errorf("history of %s: attempts %v; want %v", ev, got, want)
		}
		if got := seen[ev.String()]; !slices.Equal(got, want) {
			t.Errorf("the implementation saw attempts %v of %s; want %v", got, ev, want)
		}
	}
}

func TestConcurrentDeliveriesGetDistinctAttempts(t *testing.T) {
	t.Parallel()
	const contenders = 64
	var mu sync.Mutex
	var seen []int
	play := newPlay(t, startRun(t, shortTimeout), delivering("race", func(_ context.Context, d adapters.Delivery) (adapters.Outcome, error) {
		mu.Lock()
		seen = append(seen, d.Attempt)
		mu.Unlock()
		return adapters.Duplicate, nil
	}))
	ev := event("race")
	got := make([]harness.Attempt, contenders)
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	for i := range contenders {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-release
			got[i] = play.Deliver(t.Context(), 1+i%3, ev)
		}()
	}
	ready.Wait()
	close(release)
	done.Wait()

	want := make([]int, contenders)
	for i := range want {
		want[i] = i + 1
	}
	nums := attemptNumbers(got)
	slices.Sort(nums)
	slices.Sort(seen)
	if !slices.Equal(nums, want) || !slices.Equal(seen, want) {
		t.Errorf("attempt numbers returned %v, seen by the implementation %v; want each of 1..%d once", nums, seen, contenders)
	}
	if n := len(play.History(ev)); n != contenders {
		t.Errorf("history holds %d attempts; want %d", n, contenders)
	}
}

func TestTheImplementationGetsACopyOfThePayload(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen [][]byte
	play := newPlay(t, startRun(t, shortTimeout), delivering("mutate", func(_ context.Context, d adapters.Delivery) (adapters.Outcome, error) {
		mu.Lock()
		seen = append(seen, bytes.Clone(d.Payload))
		mu.Unlock()
		for i := range d.Payload {
			d.Payload[i] = 'X'
		}
		return adapters.Applied, nil
	}))
	original := []byte(`{"amount":100}`)
	ev := adapters.Event{Namespace: "copy", ID: "1", Payload: bytes.Clone(original)}
	play.Deliver(t.Context(), 1, ev)
	play.Deliver(t.Context(), 2, ev)

	if !bytes.Equal(ev.Payload, original) {
		t.Errorf("the caller's payload became %q", ev.Payload)
	}
	for _, a := range play.History(ev) {
		if !bytes.Equal(a.Delivery.Payload, original) {
			t.Errorf("history says attempt %d delivered %q; want %q", a.Delivery.Attempt, a.Delivery.Payload, original)
		}
	}
	for i, p := range seen {
		if !bytes.Equal(p, original) {
			t.Errorf("delivery %d reached the implementation with %q; want %q", i+1, p, original)
		}
	}
}
