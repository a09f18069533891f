package soak

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/harmless-dev/harmless/adapters"
)

const msec = time.Millisecond

// d builds one delivery of event 0: attempt a by instance w, invoked at from
// and returned at to (milliseconds).
func d(a, w int, v Variant, s Status, o adapters.Outcome, from, to int) Op {
	return Op{Attempt: uint16(a), Instance: uint16(w), Variant: v, Status: s, Outcome: o,
		Invoke: time.Duration(from) * msec, Return: time.Duration(to) * msec}
}

func applied(a, w, from, to int) Op { return d(a, w, Original, OK, adapters.Applied, from, to) }
func duplicate(a, w, from, to int) Op {
	return d(a, w, Original, OK, adapters.Duplicate, from, to)
}
func info(a, w, from, to int) Op { return d(a, w, Original, Info, 0, from, to) }

func refused(a, w int, v Variant, r Refusal, from, to int) Op {
	op := d(a, w, v, Fail, 0, from, to)
	op.Refusal = r
	return op
}

type ledgerEffect struct {
	attempt int
	variant Variant
}

// judge records ops (all of event 0) and the ledger's effects and checks.
func judge(t *testing.T, ops []Op, effects ...ledgerEffect) (Totals, []Anomaly, []Unknown) {
	t.Helper()
	c := NewChecker("ns-")
	for _, op := range ops {
		var err error
		if op.Status != OK {
			err = fmt.Errorf("delivery %d failed\nsecond line", op.Attempt)
		}
		c.Record(op, err)
	}
	for _, e := range effects {
		c.Effect(0, e.attempt, e.variant)
	}
	return c.Check(context.Background())
}

// says reports whether an explanation says want, whatever the case of its
// first letter.
func says(explanation, want string) bool {
	return strings.Contains(strings.ToLower(explanation), strings.ToLower(want))
}

func kinds(as []Anomaly) []string {
	if len(as) == 0 {
		return nil
	}
	return as[0].Kinds
}

func TestCheckerClean(t *testing.T) {
	one := ledgerEffect{1, Original}
	cases := []struct {
		name    string
		ops     []Op
		effects []ledgerEffect
	}{
		{"single applied", []Op{applied(1, 1, 0, 10)}, []ledgerEffect{one}},
		{"applied then duplicate", []Op{applied(1, 1, 0, 10), duplicate(2, 2, 20, 30)}, []ledgerEffect{one}},
		{"overlapping, duplicate answered first", []Op{applied(1, 1, 0, 50), duplicate(2, 2, 10, 20)}, []ledgerEffect{one}},
		{"overlapping, duplicate invoked first", []Op{duplicate(2, 2, 0, 50), applied(1, 1, 10, 20)}, []ledgerEffect{one}},
		{"info applied then duplicate", []Op{info(1, 1, 0, 10), duplicate(2, 2, 20, 30)}, []ledgerEffect{one}},
		{"conflicting copy rejected", []Op{applied(1, 1, 0, 10), d(2, 2, Conflicting, OK, adapters.Rejected, 20, 30)}, []ledgerEffect{one}},
		{"conflicting copy refused", []Op{applied(1, 1, 0, 10), refused(2, 2, Conflicting, RefusedConflict, 20, 30)}, []ledgerEffect{one}},
		{"conflicting copy answered duplicate", []Op{applied(1, 1, 0, 10), d(2, 2, Conflicting, OK, adapters.Duplicate, 20, 30)}, []ledgerEffect{one}},
		{"invalid refusal then applied", []Op{refused(1, 1, Original, RefusedInvalid, 0, 10), applied(2, 2, 20, 30)}, []ledgerEffect{{2, Original}}},
		// Porcupine's intervals are closed: a delivery invoked when
		// another returned overlapped it.
		{"touching intervals", []Op{duplicate(2, 2, 0, 10), applied(1, 1, 10, 20)}, []ledgerEffect{one}},
		{"hung then duplicate", []Op{func() Op { o := info(1, 1, 0, 10); o.Hung = true; return o }(), duplicate(2, 2, 20, 30)}, []ledgerEffect{one}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tot, as, _ := judge(t, tc.ops, tc.effects...)
			if len(as) != 0 || tot.Anomalous() != 0 {
				t.Fatalf("want clean, got %+v: %+v", tot, as)
			}
			if tot.Events != 1 || tot.Deliveries != len(tc.ops) {
				t.Fatalf("events %d deliveries %d, want 1 and %d", tot.Events, tot.Deliveries, len(tc.ops))
			}
		})
	}
}

func TestCheckerWrong(t *testing.T) {
	one := ledgerEffect{1, Original}
	cases := []struct {
		name    string
		ops     []Op
		explain string
	}{
		{"duplicate before any applied", []Op{duplicate(1, 1, 0, 10), applied(2, 2, 20, 30)}, "attempt 2 (instance 2) answered Applied at 0.030s, after attempt 1 (instance 1) had returned Duplicate at 0.010s"},
		{"duplicate alone", []Op{duplicate(1, 1, 0, 10), refused(2, 2, Original, RefusedInvalid, 0, 30)}, "before any delivery that could have applied the event had been invoked"},
		{"applied twice in sequence", []Op{applied(1, 1, 0, 10), applied(3, 2, 20, 30)}, "attempt 3 (instance 2) answered Applied at 0.030s, after attempt 1 (instance 1) had returned Applied at 0.010s; the ledger holds 1 effect (attempt 1, original)"},
		{"applied after duplicate returned", []Op{info(1, 1, 0, 10), duplicate(2, 2, 20, 30), applied(3, 1, 40, 50)}, "attempt 3 (instance 1) answered Applied at 0.050s, after attempt 2 (instance 2) had returned Duplicate at 0.030s"},
		{"rejected original", []Op{applied(1, 1, 0, 10), d(2, 2, Original, OK, adapters.Rejected, 20, 30)}, "though no delivery of the other payload"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tot, as, _ := judge(t, tc.ops, one)
			if tot.Wrong != 1 || len(as) != 1 || !slices.Equal(kinds(as), []string{"wrong"}) {
				t.Fatalf("want one wrong event, got %+v: %+v", tot, as)
			}
			a := as[0]
			if !says(a.Explanation, tc.explain) {
				t.Errorf("explanation %q lacks %q", a.Explanation, tc.explain)
			}
			if !strings.Contains(a.Visualization, "<html") || !strings.Contains(a.Visualization, `attempt 1 i1 original -\u003e`) {
				t.Errorf("no visualization of the event's deliveries")
			}
			if a.ID != "e0" || a.Namespace != "ns-" || len(a.History) != len(tc.ops) {
				t.Errorf("anomaly %q %q with %d deliveries", a.Namespace, a.ID, len(a.History))
			}
			for i := 1; i < len(a.History); i++ {
				if a.History[i].Invoke < a.History[i-1].Invoke {
					t.Errorf("history not in invocation order: %+v", a.History)
				}
			}
		})
	}
}

func TestCheckerLost(t *testing.T) {
	t.Run("acked applied, no effect", func(t *testing.T) {
		tot, as, _ := judge(t, []Op{applied(1, 1, 0, 10), duplicate(2, 2, 20, 30)})
		if tot.Lost != 1 || tot.Wrong != 0 || !slices.Equal(kinds(as), []string{"lost"}) {
			t.Fatalf("want lost only, got %+v: %+v", tot, as)
		}
		if want := "attempt 1 (instance 1) answered Applied at 0.010s, yet the ledger holds no effect"; !says(as[0].Explanation, want) {
			t.Errorf("explanation %q lacks %q", as[0].Explanation, want)
		}
		if as[0].Visualization != "" {
			t.Errorf("a lost event that is not wrong carries a visualization")
		}
	})
	t.Run("marker first", func(t *testing.T) {
		// The first delivery wrote the marker and died before the
		// effect; the redelivery answered Duplicate.
		tot, as, _ := judge(t, []Op{info(1, 1, 0, 10), duplicate(2, 2, 20, 30)})
		if tot.Lost != 1 || tot.Wrong != 0 || !slices.Equal(kinds(as), []string{"lost"}) {
			t.Fatalf("want lost only, got %+v: %+v", tot, as)
		}
		if tot.UnknownNotApplied != 1 {
			t.Errorf("unknown not applied %d, want 1", tot.UnknownNotApplied)
		}
		if want := "after attempt 1 (instance 1) had ended unknown at 0.010s without applying anything"; !says(as[0].Explanation, want) {
			t.Errorf("explanation %q lacks %q", as[0].Explanation, want)
		}
	})
	t.Run("destination processed none", func(t *testing.T) {
		c := NewChecker("")
		c.Record(applied(1, 1, 0, 10), nil)
		c.Effect(0, 1, Original)
		c.Destination(0, 0)
		tot, as, _ := c.Check(context.Background())
		if tot.Lost != 1 || len(as) != 1 || as[0].AtDestination == nil || *as[0].AtDestination != 0 {
			t.Fatalf("want lost at the destination, got %+v: %+v", tot, as)
		}
	})
	t.Run("destination never told", func(t *testing.T) {
		c := NewChecker("")
		for i := range uint32(2) {
			op := applied(1, 1, 0, 10)
			op.Event = i
			c.Record(op, nil)
			c.Effect(i, 1, Original)
		}
		c.Destination(1, 1)
		tot, as, _ := c.Check(context.Background())
		if tot.Lost != 1 || len(as) != 1 || as[0].ID != "e0" {
			t.Fatalf("want e0 lost, got %+v: %+v", tot, as)
		}
	})
}

func TestCheckerDuplicated(t *testing.T) {
	t.Run("two effects", func(t *testing.T) {
		tot, as, _ := judge(t, []Op{info(1, 1, 0, 10), applied(2, 2, 20, 30)}, ledgerEffect{1, Original}, ledgerEffect{2, Original})
		if tot.Duplicated != 1 || tot.Wrong != 0 || !slices.Equal(kinds(as), []string{"duplicated"}) {
			t.Fatalf("want duplicated only, got %+v: %+v", tot, as)
		}
		if want := "the ledger holds 2 effects (attempts 1 and 2)"; !says(as[0].Explanation, want) {
			t.Errorf("explanation %q lacks %q", as[0].Explanation, want)
		}
		if len(as[0].Effects) != 2 || as[0].Effects[1] != (EffectRecord{2, "original"}) {
			t.Errorf("effects %+v", as[0].Effects)
		}
		if tot.UnknownApplied != 1 {
			t.Errorf("unknown applied %d, want 1", tot.UnknownApplied)
		}
	})
	t.Run("destination processed two", func(t *testing.T) {
		c := NewChecker("")
		c.Record(applied(1, 1, 0, 10), nil)
		c.Effect(0, 1, Original)
		c.Destination(0, 2)
		tot, as, _ := c.Check(context.Background())
		if tot.Duplicated != 1 || !slices.Equal(kinds(as), []string{"duplicated"}) || *as[0].AtDestination != 2 {
			t.Fatalf("want duplicated, got %+v: %+v", tot, as)
		}
	})
	t.Run("applied twice and two effects", func(t *testing.T) {
		tot, as, _ := judge(t, []Op{applied(1, 1, 0, 10), applied(2, 2, 20, 30)}, ledgerEffect{1, Original}, ledgerEffect{2, Original})
		if tot.Duplicated != 1 || tot.Wrong != 1 || !slices.Equal(kinds(as), []string{"duplicated", "wrong"}) {
			t.Fatalf("want duplicated and wrong, got %+v: %+v", tot, as)
		}
	})
}

func TestCheckerConflictApplied(t *testing.T) {
	ops := []Op{applied(1, 1, 0, 10), d(2, 2, Conflicting, OK, adapters.Duplicate, 20, 30)}
	tot, as, _ := judge(t, ops, ledgerEffect{2, Conflicting})
	if tot.ConflictsApplied != 1 || tot.Duplicated != 0 || !slices.Equal(kinds(as), []string{"conflict-applied"}) {
		t.Fatalf("want conflict-applied only, got %+v: %+v", tot, as)
	}
	if want := "by attempt 2 (instance 2), which answered Duplicate at 0.030s"; !says(as[0].Explanation, want) {
		t.Errorf("explanation %q lacks %q", as[0].Explanation, want)
	}
	if as[0].Effects[0].Payload != "conflicting copy" {
		t.Errorf("effects %+v", as[0].Effects)
	}
}

func TestCheckerUnknowns(t *testing.T) {
	c := NewChecker("ns-")
	for i := range uint32(MaxListedUnknowns + 10) {
		op := info(1, 1, 0, 10)
		op.Event = i
		c.Record(op, errors.New("connection reset"))
		op = duplicate(2, 2, 20, 30)
		op.Event = i
		c.Record(op, nil)
		if i%2 == 0 {
			c.Effect(i, 1, Original)
		}
	}
	tot, _, us := c.Check(context.Background())
	n := MaxListedUnknowns + 10
	if tot.Unknown != n || tot.UnknownApplied != n/2 || tot.UnknownNotApplied != n/2 || tot.Lost != n/2 {
		t.Fatalf("totals %+v", tot)
	}
	if len(us) != MaxListedUnknowns {
		t.Fatalf("%d unknowns listed, want %d", len(us), MaxListedUnknowns)
	}
	if us[0] != (Unknown{ID: "e0", Attempt: 1, Error: "connection reset", Applied: true}) || us[1].Applied {
		t.Errorf("unknowns %+v", us[:2])
	}
}

func TestCheckerErrorInterning(t *testing.T) {
	c := NewChecker("")
	for i := range MaxErrors + 100 {
		op := info(1, 1, 0, 10)
		op.Event = uint32(i)
		c.Record(op, fmt.Errorf("error %d\ndetail", i))
	}
	op := info(2, 1, 20, 30)
	c.Record(op, errors.New("error 7\nother detail"))
	rec := func(i int) uint32 { return c.ops[i>>chunkBits][i&chunkMask].err }
	c.mu.Lock()
	n, first, last, again := len(c.errs), rec(0), rec(MaxErrors+50), rec(MaxErrors+100)
	c.mu.Unlock()
	if n != MaxErrors+2 { // none, MaxErrors lines, the overflow
		t.Errorf("%d strings kept, want %d", n, MaxErrors+2)
	}
	if c.Error(first) != "error 0" || c.Error(last) != MoreErrors || c.Error(again) != "error 7" {
		t.Errorf("errors %q %q %q", c.Error(first), c.Error(last), c.Error(again))
	}
}

func TestCheckerConcurrentRecord(t *testing.T) {
	const instances, per = 8, 2000
	c := NewChecker("")
	var wg sync.WaitGroup
	for w := range instances {
		wg.Go(func() {
			for i := range per {
				e := uint32(w*per + i)
				op := applied(1, w+1, i, i+1)
				op.Event = e
				c.Record(op, nil)
				op.Attempt, op.Invoke, op.Return = 2, op.Return+msec, op.Return+2*msec
				if i%10 == 0 {
					// Acknowledged Applied twice: suspicious.
					c.Record(op, nil)
				} else {
					op.Outcome = adapters.Duplicate
					c.Record(op, nil)
				}
			}
		})
	}
	wg.Wait()
	if got, want := c.Suspicious(), instances*per/10; got != want {
		t.Fatalf("suspicious %d, want %d", got, want)
	}
	for e := range uint32(instances * per) {
		c.Effect(e, 1, Original)
	}
	tot, as, _ := c.Check(context.Background())
	if tot.Events != instances*per || tot.Deliveries != 2*instances*per || tot.Wrong != instances*per/10 || len(as) != tot.Wrong {
		t.Fatalf("totals %+v, %d anomalies", tot, len(as))
	}
	for i := 1; i < len(as); i++ {
		prev, _ := ParseEventID(as[i-1].ID)
		this, _ := ParseEventID(as[i].ID)
		if prev >= this {
			t.Fatalf("anomalies not in event order: %s then %s", as[i-1].ID, as[i].ID)
		}
	}
	visualized := 0
	for _, a := range as {
		if a.Visualization != "" {
			visualized++
		}
	}
	if visualized != MaxVisualized {
		t.Errorf("%d visualizations, want %d", visualized, MaxVisualized)
	}
}

func TestCheckerIgnoresStrayEvents(t *testing.T) {
	c := NewChecker("")
	c.Record(applied(1, 1, 0, 10), nil)
	c.Effect(0, 1, Original)
	c.Effect(1<<31, 1, Original)
	c.Destination(0, 1)
	c.Destination(1<<31, 1)
	tot, as, _ := c.Check(context.Background())
	if tot.Events != 1 || len(as) != 0 || c.Bytes() > 1<<20 {
		t.Fatalf("totals %+v, %d anomalies, %d bytes", tot, len(as), c.Bytes())
	}
}

func TestCheckerContext(t *testing.T) {
	c := NewChecker("")
	for i := range uint32(5000) {
		op := applied(1, 1, 0, 10)
		op.Event = i
		c.Record(op, nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tot, as, _ := c.Check(ctx)
	if tot.Events != 0 || len(as) != 0 {
		t.Fatalf("checked %d events after ctx ended", tot.Events)
	}
}

func TestEventID(t *testing.T) {
	for _, i := range []uint32{0, 7, 1234567, 1<<32 - 1} {
		if got, ok := ParseEventID(EventID(i)); !ok || got != i {
			t.Errorf("ParseEventID(%q) = %d, %v", EventID(i), got, ok)
		}
	}
	for _, s := range []string{"", "e", "e01", "e-1", "e+1", "x1", "e4294967296", "e1 "} {
		if _, ok := ParseEventID(s); ok {
			t.Errorf("ParseEventID(%q) accepted", s)
		}
	}
}

// TestCheckerOverlappingWindows has porcupine judge windows of events whose
// deliveries overlap, some wrong: the window's one call fails and each event
// is judged again alone.
func TestCheckerOverlappingWindows(t *testing.T) {
	c := NewChecker("")
	const events = 3*windowSize + 10
	want := map[string]bool{}
	for i := range uint32(events) {
		first := applied(1, 1, 0, 50)
		second := duplicate(2, 2, 10, 20)
		if i%97 == 0 {
			second.Outcome = adapters.Applied
			want[EventID(i)] = true
		}
		first.Event, second.Event = i, i
		c.Record(second, nil)
		c.Record(first, nil)
		c.Effect(i, 1, Original)
	}
	tot, as, _ := c.Check(context.Background())
	if tot.Events != events || tot.Wrong != len(want) || len(as) != len(want) {
		t.Fatalf("totals %+v, %d anomalies, want %d wrong", tot, len(as), len(want))
	}
	for _, a := range as {
		if !want[a.ID] || !slices.Equal(a.Kinds, []string{"wrong"}) {
			t.Errorf("%s judged %v", a.ID, a.Kinds)
		}
	}
}

// TestFastPathMatchesPorcupine compares linearizable's fast path for
// deliveries that did not overlap with porcupine on every history of up to
// three sequential deliveries.
func TestFastPathMatchesPorcupine(t *testing.T) {
	var kinds []Op
	for _, v := range []Variant{Original, Conflicting} {
		for _, o := range []adapters.Outcome{adapters.Applied, adapters.Duplicate, adapters.Rejected} {
			kinds = append(kinds, d(0, 1, v, OK, o, 0, 0))
		}
		kinds = append(kinds, refused(0, 1, v, RefusedConflict, 0, 0), refused(0, 1, v, RefusedInvalid, 0, 0), d(0, 1, v, Info, 0, 0, 0))
	}
	em := eventModel()
	model := em.ToModel()
	var ops []Op
	checked, wrong := 0, 0
	var walk func()
	walk = func() {
		if len(ops) > 0 {
			if !sequential(ops) {
				t.Fatalf("not sequential: %+v", ops)
			}
			fast := linearSequence(&em, ops)
			slow := porcupine.CheckOperations(model, appendOperations(nil, ops, nil))
			if fast != slow {
				t.Errorf("fast path %v, porcupine %v: %+v", fast, slow, ops)
			}
			checked++
			if !fast {
				wrong++
			}
		}
		if len(ops) == 3 {
			return
		}
		for _, k := range kinds {
			n := len(ops)
			k.Attempt = uint16(n + 1)
			k.Invoke, k.Return = time.Duration(10*n), time.Duration(10*n+5)
			ops = append(ops, k)
			walk()
			ops = ops[:n]
		}
	}
	walk()
	if wrong == 0 || wrong == checked {
		t.Fatalf("%d of %d histories wrong: the enumeration is broken", wrong, checked)
	}
}

// An event marked unsettled (an interruption cut its redeliveries short)
// is counted, not judged lost; an unmarked one like it is lost.
func TestCheckerUnsettledIsNotLost(t *testing.T) {
	c := NewChecker(Namespace)
	for i := range uint32(2) {
		op := info(1, 1, 0, 10)
		op.Event = i
		c.Record(op, errors.New("connection reset"))
	}
	c.Unsettled(0)
	totals, anomalies, _ := c.Check(t.Context())
	if totals.Unsettled != 1 || totals.Lost != 1 || len(anomalies) != 1 || anomalies[0].ID != EventID(1) {
		t.Errorf("unsettled %d, lost %d, anomalies %+v; want e0 unsettled and e1 lost", totals.Unsettled, totals.Lost, anomalies)
	}
}

// When the implementation stopped answering, every event it never
// acknowledged or refused is unsettled, also one whose redeliveries ran
// out; an event acknowledged Duplicate without an effect, or refused, is
// still judged lost.
func TestCheckerUnsettleUnanswered(t *testing.T) {
	c := NewChecker(Namespace)
	record := func(event uint32, op Op) {
		op.Event = event
		var err error
		if op.Status != OK {
			err = errors.New("process failed")
		}
		c.Record(op, err)
	}
	record(0, info(1, 1, 0, 10)) // never answered
	record(0, info(2, 1, 20, 30))
	record(1, duplicate(1, 2, 0, 10))                         // acknowledged, no effect: lost
	record(2, refused(1, 1, Original, RefusedInvalid, 0, 10)) // refused: lost
	record(3, applied(1, 2, 0, 10))                           // applied, with its effect
	c.Effect(3, 1, Original)
	c.UnsettleUnanswered()
	totals, anomalies, _ := c.Check(t.Context())
	if totals.Unsettled != 1 || totals.Lost != 2 || len(anomalies) != 2 || anomalies[0].ID != EventID(1) || anomalies[1].ID != EventID(2) {
		t.Errorf("unsettled %d, lost %d, anomalies %+v; want e0 unsettled, e1 and e2 lost", totals.Unsettled, totals.Lost, anomalies)
	}
}
