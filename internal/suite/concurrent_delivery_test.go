package suite

import (
	"github.com/harmless-dev/harmless/internal/catalogid"
	"slices"
	"testing"
)

// TestLineUp: the seed decides how a concurrent-delivery round is lined
// up: the same seed the same way, each round its own way, the contenders
// a permutation split evenly between the two instances.
func TestLineUp(t *testing.T) {
	ev := newEvent(catalogid.ConcurrentDelivery, "overlap-1-1")
	a, b := &state{seed: 1}, &state{seed: 2}
	order1, instances1 := a.lineUp(ev, 16)
	order1b, instances1b := a.lineUp(ev, 16)
	if !slices.Equal(order1, order1b) || !slices.Equal(instances1, instances1b) {
		t.Error("the same seed lines the same round up differently")
	}
	order2, instances2 := b.lineUp(ev, 16)
	if slices.Equal(order1, order2) && slices.Equal(instances1, instances2) {
		t.Error("two seeds line a round up the same way")
	}
	if order3, _ := a.lineUp(newEvent(catalogid.ConcurrentDelivery, "overlap-2-1"), 16); slices.Equal(order1, order3) {
		t.Error("two rounds of one run are lined up the same way")
	}
	for _, n := range []int{2, 3, 16, 17} {
		order, instances := a.lineUp(ev, n)
		for i, v := range slices.Sorted(slices.Values(order)) {
			if v != i {
				t.Errorf("n=%d: order %v is not a permutation", n, order)
				break
			}
		}
		ones := 0
		for _, w := range instances {
			if w == 1 {
				ones++
			} else if w != 2 {
				t.Errorf("n=%d: instance %d", n, w)
			}
		}
		if ones != (n+1)/2 {
			t.Errorf("n=%d: %d contenders on instance 1, %d on instance 2; want a balanced split", n, ones, n-ones)
		}
	}
}
