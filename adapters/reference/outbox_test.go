package reference_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/external"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

// destination is a loopback HTTP server that takes effects as the
// harness's destination does: it processes the first request with a key
// and replays the answer to its repeats. It counts requests per key.
type destination struct {
	*httptest.Server
	mu        sync.Mutex
	requests  map[string]int              // by key
	processed map[string]int              // by key
	bodies    map[string]external.Request // by key, the first
	fail      map[string]int              // 500s to answer first, by key
	hold      bool                        // hold every request until the client gives up
	arrived   chan string                 // the key of every request held
}

func newDestination(t *testing.T) *destination {
	d := &destination{requests: map[string]int{}, processed: map[string]int{}, bodies: map[string]external.Request{}, fail: map[string]int{}, arrived: make(chan string, 100)}
	d.Server = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(d.Close)
	return d
}

func (d *destination) serve(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(external.KeyHeader)
	var body external.Request
	if r.URL.Path != external.Path || key == "" || json.NewDecoder(r.Body).Decode(&body) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	d.mu.Lock()
	d.requests[key]++
	hold := d.hold
	fail := d.fail[key] > 0
	if fail {
		d.fail[key]--
	}
	d.mu.Unlock()
	switch {
	case hold:
		d.arrived <- key
		<-r.Context().Done() // dropped unprocessed when the client goes
		return
	case fail:
		http.Error(w, "planned failure", http.StatusInternalServerError)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if first, seen := d.bodies[key]; seen {
		if first != body {
			http.Error(w, "key reused", http.StatusUnprocessableEntity)
			return
		}
		w.Header().Set("Idempotent-Replayed", "true") // as internal/destination answers a replay
		w.WriteHeader(http.StatusCreated)
		return
	}
	d.bodies[key] = body
	d.processed[key]++
	w.WriteHeader(http.StatusCreated)
}

func (d *destination) setHold(hold bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hold = hold
}

// counts returns the requests and processings of ev's key.
func (d *destination) counts(ev adapters.Event) (requests, processed int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.requests[external.Key(ev)], d.processed[external.Key(ev)]
}

func (d *destination) totalRequests() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.requests {
		n += c
	}
	return n
}

// play is the reference adapter's environment for one play: a schema with
// the ledger, and a destination.
type play struct {
	t      *testing.T
	schema string
	dest   *destination
	fail   func(adapters.Delivery) error // the effect's hook, when set
}

func newPlay(t *testing.T) *play {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := fmt.Sprintf("harmless_test_outbox_%d", time.Now().UnixNano())
	if _, err := pool.Exec(t.Context(), `CREATE SCHEMA `+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) })
	if err := ledger.Install(t.Context(), pool, schema); err != nil {
		t.Fatal(err)
	}
	return &play{t: t, schema: schema, dest: newDestination(t)}
}

// instance builds instance n; the test closes it, or cleanup does.
func (p *play) instance(n int) adapters.Implementation {
	p.t.Helper()
	impl, err := reference.Adapter().New(p.t.Context(), adapters.Env{
		DSN:    pgtest.DSN(p.t),
		Schema: p.schema,
		Effect: ledger.Effect(p.schema, func(_ context.Context, d adapters.Delivery) error {
			if p.fail != nil {
				return p.fail(d)
			}
			return nil
		}),
		Clock:       harness.SystemClock{},
		Instance:    n,
		Logf:        p.t.Logf,
		Destination: p.dest.URL,
	})
	if err != nil {
		p.t.Fatal(err)
	}
	var once sync.Once
	p.t.Cleanup(func() { once.Do(func() { _ = impl.Close(context.Background()) }) })
	return impl
}

func (p *play) deliver(impl adapters.Implementation, ev adapters.Event, attempt int, want adapters.Outcome) {
	p.t.Helper()
	got, err := impl.Deliver(p.t.Context(), adapters.Delivery{Event: ev, Attempt: attempt})
	if err != nil || got != want {
		p.t.Fatalf("attempt %d of %s = %v, %v; want %v", attempt, ev, got, err, want)
	}
}

func drain(t *testing.T, impl adapters.Implementation) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := impl.(adapters.Drainer).Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

func (p *play) outboxRows() int {
	p.t.Helper()
	return count(p.t, pgtest.Pool(p.t), `SELECT count(*) FROM `+p.schema+`.outbox`)
}

func TestReferenceDeclaresAnOutbox(t *testing.T) {
	if got := reference.Adapter().Declares.ExternalEffects; got != adapters.Outbox {
		t.Fatalf("reference declares external effects %q; want %q", got, adapters.Outbox)
	}
}

func TestCommittedClaimReachesTheDestinationOnce(t *testing.T) {
	p := newPlay(t)
	impl := p.instance(1)
	ev := adapters.Event{Namespace: "orders", ID: "42", Payload: []byte(`{"total":1}`)}
	p.deliver(impl, ev, 1, adapters.Applied)
	drain(t, impl)
	p.deliver(impl, ev, 2, adapters.Duplicate)
	p.deliver(impl, adapters.Event{Namespace: ev.Namespace, ID: ev.ID, Payload: []byte("other")}, 3, adapters.Rejected)
	drain(t, impl)
	if requests, processed := p.dest.counts(ev); requests != 1 || processed != 1 {
		t.Fatalf("%s: %d requests, %d processed; want 1 and 1", ev, requests, processed)
	}
	if total := p.dest.totalRequests(); total != 1 {
		t.Fatalf("the destination saw %d requests; want 1", total)
	}
	if n := p.outboxRows(); n != 0 {
		t.Fatalf("%d outbox rows after Drain; want 0", n)
	}
}

func TestRolledBackClaimLeavesNoOutboxRow(t *testing.T) {
	p := newPlay(t)
	boom := errors.New("boom")
	p.fail = func(d adapters.Delivery) error {
		if d.Attempt == 1 {
			return boom
		}
		return nil
	}
	impl := p.instance(1)
	ev := adapters.Event{Namespace: "orders", ID: "7", Payload: []byte("x")}
	if _, err := impl.Deliver(t.Context(), adapters.Delivery{Event: ev, Attempt: 1}); !errors.Is(err, boom) {
		t.Fatalf("attempt 1 err = %v; want %v", err, boom)
	}
	if n := p.outboxRows(); n != 0 {
		t.Fatalf("%d outbox rows after a rolled-back claim; want 0", n)
	}
	drain(t, impl)
	if total := p.dest.totalRequests(); total != 0 {
		t.Fatalf("the destination saw %d requests for a rolled-back claim; want 0", total)
	}
	p.deliver(impl, ev, 2, adapters.Applied)
	drain(t, impl)
	if requests, processed := p.dest.counts(ev); requests != 1 || processed != 1 {
		t.Fatalf("%s after its retry: %d requests, %d processed; want 1 and 1", ev, requests, processed)
	}
}

func TestDrainWaitsUntilTheDestinationAcknowledged(t *testing.T) {
	p := newPlay(t)
	ev := adapters.Event{Namespace: "orders", ID: "9", Payload: []byte("x")}
	p.dest.mu.Lock()
	p.dest.fail[external.Key(ev)] = 3
	p.dest.mu.Unlock()
	impl := p.instance(1)
	p.deliver(impl, ev, 1, adapters.Applied)
	drain(t, impl)
	if requests, processed := p.dest.counts(ev); requests != 4 || processed != 1 {
		t.Fatalf("%s when Drain returned: %d requests, %d processed; want 4 (three 500s, then 201) and 1", ev, requests, processed)
	}
}

func TestCloseLeavesPendingEffectsToTheNextInstance(t *testing.T) {
	p := newPlay(t)
	p.dest.setHold(true)
	first := p.instance(1)
	ev := adapters.Event{Namespace: "orders", ID: "11", Payload: []byte("x")}
	p.deliver(first, ev, 1, adapters.Applied)
	if key := <-p.dest.arrived; key != external.Key(ev) {
		t.Fatalf("held request key %q; want %q", key, external.Key(ev))
	}
	// Stopped between commit and the destination's answer.
	if err := first.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, processed := p.dest.counts(ev); processed != 0 {
		t.Fatalf("%s processed %d times before the next instance; want 0", ev, processed)
	}
	if n := p.outboxRows(); n != 1 {
		t.Fatalf("%d outbox rows after Close; want the 1 unsent", n)
	}
	p.dest.setHold(false)
	second := p.instance(2)
	drain(t, second)
	if requests, processed := p.dest.counts(ev); requests != 2 || processed != 1 {
		t.Fatalf("%s: %d requests, %d processed; want 2 (held, then sent by the next instance) and 1", ev, requests, processed)
	}
}

func TestTwoInstancesRelayEachEffectOnce(t *testing.T) {
	const events = 40
	p := newPlay(t)
	impls := []adapters.Implementation{p.instance(1), p.instance(2)}
	var wg sync.WaitGroup
	for i := range events {
		wg.Go(func() {
			ev := adapters.Event{Namespace: "orders", ID: fmt.Sprint(i), Payload: []byte("x")}
			if got, err := impls[i%2].Deliver(t.Context(), adapters.Delivery{Event: ev, Attempt: 1}); err != nil || got != adapters.Applied {
				t.Errorf("%s = %v, %v; want Applied", ev, got, err)
			}
		})
	}
	wg.Wait()
	for _, impl := range impls {
		drain(t, impl)
	}
	for i := range events {
		ev := adapters.Event{Namespace: "orders", ID: fmt.Sprint(i), Payload: []byte("x")}
		if requests, processed := p.dest.counts(ev); requests != 1 || processed != 1 {
			t.Errorf("%s: %d requests, %d processed; want 1 and 1", ev, requests, processed)
		}
	}
	if total := p.dest.totalRequests(); total != events {
		t.Fatalf("the destination saw %d requests; want %d", total, events)
	}
}

func TestNoDestinationNoOutbox(t *testing.T) {
	p := newPlay(t)
	impl, err := reference.Adapter().New(t.Context(), adapters.Env{
		DSN: pgtest.DSN(t), Schema: p.schema, Effect: ledger.Effect(p.schema, nil), Clock: harness.SystemClock{}, Instance: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer impl.Close(context.Background())
	p.deliver(impl, adapters.Event{Namespace: "orders", ID: "1"}, 1, adapters.Applied)
	drain(t, impl)
	if n := count(t, pgtest.Pool(t), `SELECT count(*) FROM pg_tables WHERE schemaname = '`+p.schema+`' AND tablename = 'outbox'`); n != 0 {
		t.Fatalf("an instance without a destination created the outbox table")
	}
}
