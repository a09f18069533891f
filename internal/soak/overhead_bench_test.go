package soak_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/internal/soak"
)

// BenchmarkSoakOverhead measures what the soak's own machinery costs: in one
// run on one server, the reference's instances are called directly by 8
// goroutines (the baseline: the implementation alone, on the same schema,
// ledger and fault triggers), then the same number of events goes through
// harmless soak with 8 instances and no nemesis. It reports both throughputs
// and the soak's share of the baseline (goal: 0.9 or more; the pgbench
// comparison in ci/bench-soak.sh measures the Go client as well).
//
//	go test ./internal/soak -run '^$' -bench SoakOverhead -benchtime 20000x
func BenchmarkSoakOverhead(b *testing.B) {
	const instances = 8
	adapter, err := builtin.Lookup("reference")
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	run, err := harness.Start(ctx, harness.Options{Provision: provision.Options{DSN: pgtest.DSN(b), Only: provision.KindDSN}})
	if err != nil {
		b.Fatal(err)
	}
	defer run.Close(context.WithoutCancel(ctx))
	events := max(b.N, 1000)

	direct := directThroughput(b, run, adapter, instances, events)
	rep, err := soak.Run(ctx, run, adapter, soak.Config{Events: events, Instances: instances, Seed: 1,
		DeliveryTimeout: harness.DefaultDeliveryTimeout}, soak.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if !rep.Clean() {
		b.Fatalf("the reference's soak found anomalies: %+v", rep.Totals)
	}
	b.ReportMetric(direct, "direct/s")
	b.ReportMetric(rep.Throughput, "soak/s")
	b.ReportMetric(rep.Throughput/direct, "soak/direct")
	b.Logf("%d events, %d instances: the implementation alone %.0f/s, through the soak %.0f/s, ratio %.2f",
		events, instances, direct, rep.Throughput, rep.Throughput/direct)
}

// directThroughput delivers events distinct events to that many instances
// of adapter, called directly, and returns the deliveries per second.
func directThroughput(b *testing.B, run *harness.Run, adapter adapters.Adapter, instances, events int) float64 {
	ctx := b.Context()
	play, err := run.NewPlayWith(ctx, adapter, harness.PlayOptions{NoHistory: true, SystemClock: true})
	if err != nil {
		b.Fatal(err)
	}
	defer play.Close(context.WithoutCancel(ctx))
	impls := make([]adapters.Implementation, instances)
	for n := range impls {
		if impls[n], err = play.Instance(ctx, n+1); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for _, impl := range impls {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(events); i = next.Add(1) {
				ev := adapters.Event{Namespace: soak.Namespace, ID: fmt.Sprintf("d%d", i),
					Payload: fmt.Appendf(nil, `{"event":%d,"amount_cents":%d,"currency":"EUR","note":"soak"}`, i, i*7919%1000000)}
				if _, err := impl.Deliver(ctx, adapters.Delivery{Event: ev, Attempt: 1}); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
	return float64(events) / time.Since(start).Seconds()
}
