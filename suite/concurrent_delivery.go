package suite

import (
	"context"
	"fmt"
	"strings"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/harness"
)

// roundResult is what one concurrent-delivery round left behind: the
// violations of each rule it found.
type roundResult struct {
	oneEffect  []string
	oneApplied []string
}

func (s *state) concurrentDelivery() {
	Describe(fixtures.ConcurrentDelivery, Label("fixture:"+fixtures.ConcurrentDelivery), func() {
		variants := []struct {
			name    string
			overlap bool
		}{
			{name: "plain", overlap: false},
			{name: "with a sleep after the claim", overlap: true},
		}
		for _, v := range variants {
			Describe(v.name, Ordered, ContinueOnFailure, func() {
				var rounds []roundResult
				BeforeAll(func(ctx SpecContext) {
					spec := s.newSpec(ctx)
					n := s.cfg.plainRounds
					if v.overlap {
						n = s.cfg.overlapRounds
					}
					rounds = make([]roundResult, 0, n)
					for round := 1; round <= n && ctx.Err() == nil; round++ {
						rounds = append(rounds, s.concurrentRound(ctx, spec, round, v.overlap))
					}
					s.cfg.logf("concurrent-delivery (%s): %d rounds of %d contenders", v.name, len(rounds), s.cfg.contenders)
				}, NodeTimeout(fixtureTimeout))

				rule(fixtures.ConcurrentDeliveryOneEffect, func() []string {
					return collect(rounds, func(r roundResult) []string { return r.oneEffect })
				})
				rule(fixtures.ConcurrentDeliveryOneApplied, func() []string {
					return collect(rounds, func(r roundResult) []string { return r.oneApplied })
				})
			})
		}
	})
}

// concurrentRound releases s.cfg.contenders deliveries of one new event
// together, spread over two workers, each redelivered until acknowledged.
func (s *state) concurrentRound(ctx context.Context, spec *harness.Spec, round int, overlap bool) roundResult {
	GinkgoHelper()
	variant := "plain"
	if overlap {
		variant = "overlap"
	}
	ev := newEvent(fixtures.ConcurrentDelivery, fmt.Sprintf("%s-%d", variant, round))

	var sleep *faults.Fault
	if overlap {
		var err error
		sleep, err = spec.Arm(ctx, faults.Plan{
			Namespace: ev.Namespace, ID: ev.ID, Point: faults.AtEffect,
			Action: faults.Sleep, Sleep: s.cfg.overlapSleep,
		})
		Expect(err).NotTo(HaveOccurred())
	}
	// Build both workers before the race, so that construction is not part
	// of it. A factory failure shows up in the attempts.
	for worker := 1; worker <= 2; worker++ {
		_, _ = spec.Instance(ctx, worker)
	}

	contenders := make([][]harness.Attempt, s.cfg.contenders)
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	for i := range contenders {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer GinkgoRecover()
			defer done.Done()
			ready.Done()
			<-release
			contenders[i] = spec.DeliverUntilTerminal(ctx, 1+i%2, ev, s.cfg.maxTries)
		}()
	}
	ready.Wait()
	close(release)
	done.Wait()

	effects, err := spec.Effects(ctx, ev)
	Expect(err).NotTo(HaveOccurred())
	history := spec.History(ev)
	describe := func() string { return harness.DescribeEvent(ev, effects, history) }

	var r roundResult
	prefix := fmt.Sprintf("round %d (%s, %d contenders): ", round, variant, len(contenders))
	if overlap {
		if problem := s.overlapProblem(ctx, spec, sleep, contenders); problem != "" {
			r.oneEffect = append(r.oneEffect, prefix+problem)
			r.oneApplied = append(r.oneApplied, prefix+problem)
		}
	}
	if len(effects) != 1 {
		r.oneEffect = append(r.oneEffect, prefix+describe())
	}

	var applied, duplicate int
	var odd []string
	for i, tries := range contenders {
		last := tries[len(tries)-1]
		switch {
		case last.Acked() && last.Outcome == adapters.Applied:
			applied++
		case last.Acked() && last.Outcome == adapters.Duplicate:
			duplicate++
		default:
			odd = append(odd, fmt.Sprintf("contender %d ended %s after %d attempts", i+1, last.Result(), len(tries)))
		}
	}
	if applied != 1 || len(odd) > 0 {
		msg := fmt.Sprintf("%d Applied and %d Duplicate; expected 1 Applied and %d Duplicate", applied, duplicate, len(contenders)-1)
		if len(odd) > 0 {
			msg += "; " + strings.Join(odd, "; ")
		}
		r.oneApplied = append(r.oneApplied, prefix+msg+"\n"+describe())
	}
	return r
}

// overlapProblem checks that the round proved what it claims: the planned
// sleep fired, and every contender was delivered before the winning delivery
// returned, so all of them overlapped its open, sleeping transaction.
func (s *state) overlapProblem(ctx context.Context, spec *harness.Spec, sleep *faults.Fault, contenders [][]harness.Attempt) string {
	GinkgoHelper()
	fired, err := spec.Fired(ctx, sleep)
	Expect(err).NotTo(HaveOccurred())
	if fired == 0 {
		return fmt.Sprintf("the planned fault (%s) did not fire: no delivery reached the effect", sleep)
	}
	var winner *harness.Attempt
	for _, tries := range contenders {
		for i, a := range tries {
			if a.Acked() && a.Outcome == adapters.Applied && (winner == nil || a.Ended < winner.Ended) {
				winner = &tries[i]
			}
		}
	}
	if winner == nil {
		return "" // no winner: the outcome rules report it
	}
	for i, tries := range contenders {
		if first := tries[0]; first.Started > winner.Ended {
			return fmt.Sprintf("contender %d was delivered %s after the winning delivery (attempt %d) had returned; the contenders did not overlap, so the round proves nothing",
				i+1, first.Started-winner.Ended, winner.Delivery.Attempt)
		}
	}
	return ""
}

func collect(rounds []roundResult, pick func(roundResult) []string) []string {
	var problems []string
	for _, r := range rounds {
		problems = append(problems, pick(r)...)
	}
	if len(rounds) == 0 {
		problems = append(problems, "no round ran")
	}
	return problems
}
