package suite

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// identityPair is two events that are different but would collide under a
// careless key.
type identityPair struct {
	why  string
	a, b adapters.Event
}

// namespacePairs are the pairs of the namespace-isolation fixture: the first
// is the same id in two namespaces, the others collide if namespace and id
// are joined into one string.
func namespacePairs() (sameID identityPair, joined []identityPair) {
	ev := func(namespace, id string) adapters.Event {
		return adapters.Event{Namespace: namespace, ID: id, Payload: fmt.Appendf(nil, `{"namespace":%q,"id":%q}`, namespace, id)}
	}
	sameID = identityPair{"the same id in two namespaces", ev("harmless.orders", "42"), ev("harmless.refunds", "42")}
	joined = []identityPair{
		{`joined with ":"`, ev("a:b", "c"), ev("a", "b:c")},
		{"joined without a separator", ev("ab", "c"), ev("a", "bc")},
		{"an empty namespace, joined without a separator", ev("", "ab"), ev("a", "b")},
		{`an empty namespace, joined with ":"`, ev("", "a:b"), ev(":a", "b")},
	}
	return sameID, joined
}

// pairResult is what delivering both events of a pair left behind.
type pairResult struct {
	pair     identityPair
	attempts [2][]harness.Attempt
	effects  [2][]ledger.Entry
}

// problem says how the pair failed to be two events, or "".
func (p pairResult) problem() string {
	for i, ev := range []adapters.Event{p.pair.a, p.pair.b} {
		last := p.attempts[i][len(p.attempts[i])-1]
		if !last.Acked() || last.Outcome != adapters.Applied || len(p.effects[i]) != 1 {
			return fmt.Sprintf("%s: %s and %s must be two events, each applied once; %s was delivered after %s\n%s\n%s",
				p.pair.why, p.pair.a, p.pair.b, ev, []adapters.Event{p.pair.b, p.pair.a}[i],
				harness.DescribeEvent(p.pair.a, p.effects[0], p.attempts[0]),
				harness.DescribeEvent(p.pair.b, p.effects[1], p.attempts[1]))
		}
	}
	return ""
}

func (s *state) namespaceIsolation() {
	Describe(fixtures.NamespaceIsolation, Label("fixture:"+fixtures.NamespaceIsolation), Ordered, ContinueOnFailure, func() {
		var sameID pairResult
		var joined []pairResult
		same, pairs := namespacePairs()
		// Two instances to build; each event of each pair delivered until
		// terminal.
		sc := s.scenario(fixtures.NamespaceIsolation, 2+2*(1+len(pairs))*s.cfg.maxTries, 0)
		BeforeAll(func(ctx SpecContext) {
			spec := sc.begin(ctx)
			play := func(p identityPair) pairResult {
				r := pairResult{pair: p}
				for i, ev := range []adapters.Event{p.a, p.b} {
					r.attempts[i] = spec.DeliverUntilTerminal(ctx, 1+i, ev, s.cfg.maxTries)
				}
				for i, ev := range []adapters.Event{p.a, p.b} {
					var err error
					r.effects[i], err = spec.Effects(ctx, ev)
					Expect(err).NotTo(HaveOccurred())
				}
				return r
			}
			sc.at("the same id in two namespaces")
			sameID = play(same)
			for i, p := range pairs {
				sc.at("colliding pair %d of %d", i+1, len(pairs))
				joined = append(joined, play(p))
			}
		}, sc.timeout())

		sc.rule(fixtures.NamespaceIsolationSameID, func() []string {
			if p := sameID.problem(); p != "" {
				return []string{p}
			}
			return nil
		})
		sc.rule(fixtures.NamespaceIsolationUnambiguous, func() []string {
			var problems []string
			for _, r := range joined {
				if p := r.problem(); p != "" {
					problems = append(problems, p)
				}
			}
			return problems
		})
	})
}
