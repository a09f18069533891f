package soak

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/harmless-dev/harmless/adapters"
)

// syntheticHistory is a clean, realistic soak: about 1.35 deliveries per
// event, 30% of events delivered twice (a third of those concurrently to
// another instance), 2% with a first delivery of unknown outcome (that applied
// the effect half the time) redelivered, 1% with a conflicting copy after
// the original was acknowledged.
type syntheticHistory struct {
	ops     []Op
	errs    []error
	effects []Op // Event and Attempt of each ledger effect, Variant
}

func synthesize(events int, seed uint64) syntheticHistory {
	r := rand.New(rand.NewPCG(seed, 1))
	h := syntheticHistory{ops: make([]Op, 0, events*14/10)}
	timeout := errors.New("deliver: context deadline exceeded")
	const instances = 4
	lat := func() time.Duration { return time.Duration(500+r.IntN(4500)) * time.Microsecond }
	for i := range events {
		e := uint32(i)
		t := time.Duration(i) * 250 * time.Microsecond
		w := uint16(1 + r.IntN(instances))
		other := uint16(1 + (int(w)+r.IntN(instances-1))%instances)
		first := Op{Event: e, Instance: w, Attempt: 1, Status: OK, Outcome: adapters.Applied, Invoke: t, Return: t + lat()}
		applier := uint16(1)
		next := uint16(2)
		if r.Float64() < 0.02 {
			first.Status, first.Outcome = Info, 0
			h.ops = append(h.ops, first)
			h.errs = append(h.errs, timeout)
			re := Op{Event: e, Instance: other, Attempt: 2, Status: OK, Outcome: adapters.Applied,
				Invoke: first.Return + time.Millisecond, Return: first.Return + time.Millisecond + lat()}
			if r.IntN(2) == 0 {
				re.Outcome = adapters.Duplicate
			} else {
				applier = 2
			}
			h.ops = append(h.ops, re)
			h.errs = append(h.errs, nil)
			first = re
			next = 3
		} else {
			h.ops = append(h.ops, first)
			h.errs = append(h.errs, nil)
		}
		h.effects = append(h.effects, Op{Event: e, Attempt: applier})
		if r.Float64() < 0.3 {
			dup := Op{Event: e, Instance: other, Attempt: next, Status: OK, Outcome: adapters.Duplicate}
			if r.IntN(3) == 0 {
				// Concurrent: invoked while the first was running,
				// answered Duplicate once it had claimed the event.
				dup.Invoke = first.Invoke + (first.Return-first.Invoke)/2
				dup.Return = first.Return + lat()/4
			} else {
				dup.Invoke = first.Return + time.Duration(r.IntN(1000))*time.Millisecond
				dup.Return = dup.Invoke + lat()
			}
			h.ops = append(h.ops, dup)
			h.errs = append(h.errs, nil)
			next++
		}
		if r.Float64() < 0.01 {
			c := Op{Event: e, Instance: w, Attempt: next, Variant: Conflicting, Status: OK, Outcome: adapters.Rejected,
				Invoke: first.Return + 2*time.Second}
			c.Return = c.Invoke + lat()
			h.ops = append(h.ops, c)
			h.errs = append(h.errs, nil)
		}
	}
	return h
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func BenchmarkChecker(b *testing.B) {
	for _, size := range []struct {
		name   string
		events int
	}{{"10k", 10_000}, {"100k", 100_000}, {"1M", 1_000_000}} {
		b.Run(size.name, func(b *testing.B) {
			h := synthesize(size.events, 14)
			var recordNs, checkNs, heapBytes, bytes float64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				before := heapInUse()
				b.StartTimer()
				start := time.Now()
				c := NewChecker("soak-")
				for j, op := range h.ops {
					c.Record(op, h.errs[j])
				}
				for _, e := range h.effects {
					c.Effect(e.Event, int(e.Attempt), e.Variant)
				}
				recorded := time.Now()
				b.StopTimer()
				heapBytes = float64(int64(heapInUse()-before)) / float64(size.events)
				bytes = float64(c.Bytes()) / float64(size.events)
				b.StartTimer()
				checkStart := time.Now()
				t, as, _ := c.Check(context.Background())
				checkNs += float64(time.Since(checkStart).Nanoseconds())
				recordNs += float64(recorded.Sub(start).Nanoseconds())
				if t.Events != size.events || len(as) != 0 {
					b.Fatalf("synthetic history judged %+v with %d anomalies: %+v", t, len(as), as[0])
				}
			}
			n := float64(b.N) * float64(size.events)
			b.ReportMetric((recordNs+checkNs)/n, "ns/event")
			b.ReportMetric(recordNs/n, "record-ns/event")
			b.ReportMetric(checkNs/n, "check-ns/event")
			b.ReportMetric(bytes, "bytes/event")
			b.ReportMetric(heapBytes, "heap-bytes/event")
			b.ReportMetric(float64(len(h.ops))/float64(size.events), "ops/event")
			runtime.KeepAlive(h)
		})
	}
}

// BenchmarkLinearizable compares calling porcupine once per event with one
// call per batch of events partitioned by event (Model.Partition), on the
// synthetic history's events whose deliveries overlapped (the others take
// linearizable's fast path): the measurement behind Check calling it per
// event.
func BenchmarkLinearizable(b *testing.B) {
	h := synthesize(100_000, 14)
	byEvent := make(map[uint32][]Op)
	for _, op := range h.ops {
		byEvent[op.Event] = append(byEvent[op.Event], op)
	}
	var multi [][]Op // the events with overlapping deliveries
	for e := range uint32(100_000) {
		if ops := byEvent[e]; len(ops) > 1 {
			sortOps(ops)
			if !sequential(ops) {
				multi = append(multi, ops)
			}
		}
	}
	em := eventModel()
	model := em.ToModel()
	b.Run("per-event", func(b *testing.B) {
		for b.Loop() {
			for _, ops := range multi {
				if !linearizable(&em, model, ops) {
					b.Fatal("not linearizable")
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(multi)), "ns/event")
	})
	for _, batch := range []int{64, 1024} {
		b.Run("partition-"+strconv.Itoa(batch), func(b *testing.B) {
			pm := model
			pm.Partition = func(history []porcupine.Operation) [][]porcupine.Operation {
				var parts [][]porcupine.Operation
				for i := 0; i < len(history); {
					j := i + 1
					for j < len(history) && history[j].Metadata == history[i].Metadata {
						j++
					}
					parts = append(parts, history[i:j])
					i = j
				}
				return parts
			}
			for b.Loop() {
				for i := 0; i < len(multi); i += batch {
					var hist []porcupine.Operation
					for k, ops := range multi[i:min(i+batch, len(multi))] {
						for _, o := range appendOperations(nil, ops, nil) {
							o.Metadata = k
							hist = append(hist, o)
						}
					}
					if !porcupine.CheckOperations(pm, hist) {
						b.Fatal("not linearizable")
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(multi)), "ns/event")
		})
	}
}
