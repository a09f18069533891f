package destination

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
)

// settleAsync runs Settle in the background and returns what it returns,
// and when.
func settleAsync(t *testing.T, s *Server, pace, floor time.Duration) <-chan settled {
	t.Helper()
	done := make(chan settled, 1)
	go func() {
		st, err := s.Settle(t.Context(), pace, floor)
		done <- settled{st, err, time.Now()}
	}()
	return done
}

type settled struct {
	st  Settlement
	err error
	at  time.Time
}

// lastAt is when the destination read its last request.
func lastAt(t *testing.T, s *Server) time.Time {
	t.Helper()
	recs := s.Requests()
	if len(recs) == 0 {
		t.Fatal("no request read")
	}
	return recs[len(recs)-1].At
}

// TestSettleOnceNothingIsOwed: an effect expected and acknowledged ends
// the wait a settle after its request (as long as the sender waited before
// it, at least the floor), far short of the pace.
func TestSettleOnceNothingIsOwed(t *testing.T) {
	t.Parallel()
	s := start(t)
	const pace, floor, wait = 10 * time.Second, 50 * time.Millisecond, 300 * time.Millisecond
	// Committed a while ago: the sender waited that long before its send.
	if n := s.Expect(map[Identity]time.Time{IdentityOf(ev1): time.Now().Add(-wait)}); n != 1 {
		t.Fatalf("Expect added %d identities; want 1", n)
	}
	done := settleAsync(t, s, pace, floor)
	if r := mustPost(t, s, wire(ev1), "k"); r.status != 201 {
		t.Fatalf("POST: %d; want 201", r.status)
	}
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	quiet := got.at.Sub(lastAt(t, s))
	if !got.st.Settled || got.st.Owed != 0 || got.st.Expected != 1 || got.st.Observed < wait || quiet < got.st.Quiet || quiet >= pace/2 {
		t.Errorf("Settle ended %s after the request with %+v; want it settled, nothing owed, a settle of the %s the sender waited", quiet, got.st, wait)
	}
}

// TestSettleWaitsForARetry: a request processed but dropped leaves its
// effect owed, so Settle waits at the pace, not the settle, and a retry
// with the key, answered with a replay, settles it.
func TestSettleWaitsForARetry(t *testing.T) {
	t.Parallel()
	s := start(t)
	const pace, floor = 300 * time.Millisecond, 10 * time.Millisecond
	s.Expect(map[Identity]time.Time{IdentityOf(ev1): time.Now()})
	if _, err := s.DropAfterProcess(ev1, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := post(t, s, wire(ev1), "k"); err == nil {
		t.Fatal("the dropped request got an answer")
	}
	got := <-settleAsync(t, s, pace, floor)
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.st.Settled || got.st.Owed != 1 || got.at.Sub(lastAt(t, s)) < pace {
		t.Errorf("Settle with the effect's only request dropped: %+v, %s after it; want it owed, after the whole pace %s", got.st, got.at.Sub(lastAt(t, s)), pace)
	}
	if r := mustPost(t, s, wire(ev1), "k"); !r.replayed {
		t.Fatalf("the retry was not replayed: %+v", r)
	}
	got = <-settleAsync(t, s, pace, floor)
	if got.err != nil || !got.st.Settled || got.st.Owed != 0 {
		t.Errorf("Settle after the replay: %+v, %v; want it settled", got.st, got.err)
	}
}

// TestSettleSeesAResend: a second send of an acknowledged effect, with a
// new key, within the settle, is read before Settle returns: the settle
// starts again from it, and while it is in progress the effect is owed.
func TestSettleSeesAResend(t *testing.T) {
	t.Parallel()
	s := start(t)
	const pace, floor = 10 * time.Second, 10 * time.Millisecond
	// The sender took 400 ms after the commit: the settle is as long.
	s.Expect(map[Identity]time.Time{IdentityOf(ev1): time.Now().Add(-400 * time.Millisecond)})
	mustPost(t, s, wire(ev1), "k")
	done := settleAsync(t, s, pace, floor)
	f, err := s.Hold(ev1, 2)
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() {
		_, err := post(t, s, wire(ev1), "k-again")
		held <- err
	}()
	<-f.Arrived()
	select {
	case got := <-done:
		t.Fatalf("Settle returned while a resend was in progress: %+v, %v", got.st, got.err)
	case <-time.After(600 * time.Millisecond):
	}
	f.Release()
	<-held
	if r := mustPost(t, s, wire(ev1), "k-again"); r.status != 201 || s.Processed(ev1) != 2 {
		t.Fatalf("the resend's retry: %+v, processed %d; want the second effect", r, s.Processed(ev1))
	}
	got := <-done
	if got.err != nil || !got.st.Settled || got.at.Sub(lastAt(t, s)) < got.st.Quiet {
		t.Errorf("Settle: %+v, %v, %s after the last request; want it settled a settle after the resend", got.st, got.err, got.at.Sub(lastAt(t, s)))
	}
}

// TestSettleWithoutEvidence: with nothing expected, or no commit time, the
// settle is the whole pace from the call, as Quiet; and ctx bounds it.
func TestSettleWithoutEvidence(t *testing.T) {
	t.Parallel()
	s := start(t)
	const pace = 200 * time.Millisecond
	mustPost(t, s, wire(ev1), "k")
	called := time.Now()
	st, err := s.Settle(t.Context(), pace, 0)
	if err != nil || st.Settled || st.Expected != 0 || time.Since(called) < pace {
		t.Errorf("Settle with nothing expected: %+v, %v after %s; want the pace %s from the call", st, err, time.Since(called), pace)
	}
	ev2 := adapters.Event{Namespace: "orders", ID: "43"}
	s.Expect(map[Identity]time.Time{IdentityOf(ev1): {}, IdentityOf(ev2): {}})
	ctx, cancel := context.WithTimeout(t.Context(), pace/2)
	defer cancel()
	if st, err := s.Settle(ctx, pace, 0); !errors.Is(err, context.DeadlineExceeded) || st.Owed != 1 || st.Expected != 2 {
		t.Errorf("Settle cut by its context with one effect owed: %+v, %v; want the deadline, 1 of 2 owed", st, err)
	}
}
