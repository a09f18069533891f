package exec

import (
	"context"
	"fmt"
	"testing"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/execchild"
)

// BenchmarkDeliver measures what crossing the process boundary costs: the
// same reference Store, on the same server, delivered to in process and
// through the exec protocol, one new event per operation. Compare the two
// sub-benchmarks of one run (benchstat), never a figure from another
// machine or another time.
func BenchmarkDeliver(b *testing.B) {
	b.Run("in-process", func(b *testing.B) { benchmarkDeliver(b, reference.Adapter()) })
	b.Run("exec", func(b *testing.B) {
		adapter, _, err := Probe(context.Background(), Config{Command: execchild.Command(execchild.Reference)})
		if err != nil {
			b.Fatal(err)
		}
		benchmarkDeliver(b, adapter)
	})
}

func benchmarkDeliver(b *testing.B, adapter adapters.Adapter) {
	e := env(b)
	ctx := context.Background()
	impl, err := adapter.New(ctx, e)
	if err != nil {
		b.Fatal(err)
	}
	defer impl.Close(ctx)
	b.ResetTimer()
	for i := range b.N {
		ev := adapters.Event{Namespace: "bench", ID: fmt.Sprint(i), Payload: []byte("payload")}
		if o, err := impl.Deliver(ctx, adapters.Delivery{Event: ev, Attempt: 1}); err != nil || o != adapters.Applied {
			b.Fatalf("delivery %d: %v, %v", i, o, err)
		}
	}
}
