package soak

import (
	"bytes"
	"testing"
)

// A seed repeats the stream: the same plans and payloads; another seed
// draws another one, and a conflicting copy always differs.
func TestGeneratorRepeatsItsStream(t *testing.T) {
	cfg := Config{Duplicates: 0.3, Conflicts: 0.1, Seed: 42}
	a, b, other := newGenerator(cfg), newGenerator(cfg), newGenerator(Config{Duplicates: 0.3, Conflicts: 0.1, Seed: 43})
	var differs, dups, conflicts int
	for i := range uint32(1000) {
		da, la, ca := a.plan()
		db, lb, cb := b.plan()
		if da != db || la != lb || ca != cb {
			t.Fatalf("event %d: plans differ under one seed", i)
		}
		if !bytes.Equal(a.payload(i, Original), b.payload(i, Original)) {
			t.Fatalf("event %d: payloads differ under one seed", i)
		}
		if bytes.Equal(a.payload(i, Original), a.payload(i, Conflicting)) {
			t.Fatalf("event %d: the conflicting copy has the original's payload", i)
		}
		if !bytes.Equal(a.payload(i, Original), other.payload(i, Original)) {
			differs++
		}
		if da != once {
			dups++
		}
		if ca {
			conflicts++
		}
	}
	if differs < 990 {
		t.Errorf("another seed drew the same payload for %d of 1000 events", 1000-differs)
	}
	if dups < 250 || dups > 350 || conflicts < 60 || conflicts > 140 {
		t.Errorf("of 1000 events %d duplicated (30%% asked) and %d with a conflicting copy (10%% asked)", dups, conflicts)
	}
}
