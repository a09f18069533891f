package soak

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/harmless-dev/harmless/adapters"
)

// Namespace is the namespace of every event a soak delivers.
const Namespace = "soak"

// dupKind is how an event is delivered more than once, beyond the
// redeliveries of failed deliveries.
type dupKind uint8

const (
	once dupKind = iota
	// atOnce: again as soon as the first delivery ended, as a broker does
	// after an ack that was lost.
	atOnce
	// concurrently: twice at the same moment, to two instances, as after a
	// rebalance.
	concurrently
	// later: again after a while, as a broker does after an ack timeout.
	later
)

// generator makes the soak's event stream from its seed: the payloads are
// a function of the seed and the event's index, so the ledger scan can
// tell an original from a conflicting copy without storing either.
type generator struct {
	seed int64
	rng  *rand.Rand
	cfg  Config
}

func newGenerator(cfg Config) *generator {
	return &generator{seed: cfg.Seed, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x50a6)), cfg: cfg}
}

// plan draws how event i is delivered: its dupKind kind, the delay of a
// later dupKind, and whether it gets a conflicting copy.
func (g *generator) plan() (dup dupKind, delay time.Duration, conflict bool) {
	if g.rng.Float64() < g.cfg.Duplicates {
		dup = dupKind(1 + g.rng.IntN(3))
	}
	if dup == later {
		delay = time.Duration(100+g.rng.IntN(2900)) * time.Millisecond
	}
	return dup, delay, g.rng.Float64() < g.cfg.Conflicts
}

// jitter draws a duration in [0, d).
func (g *generator) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(g.rng.Int64N(int64(d)))
}

// event is event i with the payload of variant v.
func (g *generator) event(i uint32, v Variant) adapters.Event {
	return adapters.Event{Namespace: Namespace, ID: EventID(i), Payload: g.payload(i, v)}
}

// payload is event i's payload, about 64 bytes of JSON: an amount drawn
// from the seed and the index, another one for the conflicting copy.
func (g *generator) payload(i uint32, v Variant) []byte {
	h := fnv.New64a()
	var b [13]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(g.seed))
	binary.LittleEndian.PutUint32(b[8:12], i)
	b[12] = byte(v)
	h.Write(b[:])
	amount := h.Sum64() % 1_000_000
	if v == Conflicting {
		return fmt.Appendf(nil, `{"event":%d,"amount_cents":%d,"currency":"EUR","copy":"conflicting"}`, i, amount)
	}
	return fmt.Appendf(nil, `{"event":%d,"amount_cents":%d,"currency":"EUR","note":"soak"}`, i, amount)
}

// digests returns the payload digests of event i's two variants, as the
// ledger records them.
func (g *generator) digests(i uint32) (original, conflicting string) {
	return adapters.PayloadDigest(g.payload(i, Original)), adapters.PayloadDigest(g.payload(i, Conflicting))
}
