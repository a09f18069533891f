package suite

import (
	"context"
	"fmt"
	"strings"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
)

// join is one way of building a single key from an identity: namespace and
// id, or id and namespace, joined with a separator or without one. Every
// such join is ambiguous, and the fixture has a pair of events that it
// merges.
type join struct {
	sep     string
	idFirst bool
}

// joinSeparators are the separators the fixture exposes a join with: none,
// the common ones, and NUL.
var joinSeparators = []string{"", "/", ":", "|", ".", "\x00", "-", "_", "#", ",", ";", " ", "@"}

// joins returns every join the fixture exposes: each separator, in both
// orders.
func joins() []join {
	var out []join
	for _, sep := range joinSeparators {
		out = append(out, join{sep: sep}, join{sep: sep, idFirst: true})
	}
	return out
}

// key is ev's key under the join.
func (j join) key(ev adapters.Event) string {
	if j.idFirst {
		return ev.ID + j.sep + ev.Namespace
	}
	return ev.Namespace + j.sep + ev.ID
}

func (j join) String() string {
	order := "namespace and id"
	if j.idFirst {
		order = "id and namespace"
	}
	if j.sep == "" {
		return order + " joined without a separator"
	}
	return fmt.Sprintf("%s joined with %q", order, j.sep)
}

// namespacePairs are the pairs of the namespace-isolation fixture: the first
// is the same id in two namespaces; each of the others is merged by one
// join. Every pair has a token of its own, so that no join merges events of
// two different pairs.
func namespacePairs() (sameID identityPair, joined []identityPair) {
	ev := func(namespace, id string) adapters.Event {
		return adapters.Event{Namespace: namespace, ID: id, Payload: fmt.Appendf(nil, `{"namespace":%q,"id":%q}`, namespace, id)}
	}
	sameID = identityPair{"the same id in two namespaces", ev("harmless.orders", "42"), ev("harmless.refunds", "42")}
	add := func(j join, a, b adapters.Event) {
		joined = append(joined, identityPair{fmt.Sprintf("%s, both are %q", j, j.key(a)), a, b})
	}
	token := func() string { return fmt.Sprintf("p%d", len(joined)+1) }
	const ns, id = "harmless", "42"
	for _, sep := range joinSeparators {
		// The separator in the first event's namespace and in the second
		// event's id: ns+sep+t + sep + id = ns + sep + t+sep+id.
		t := token()
		add(join{sep: sep}, ev(ns+sep+t, id), ev(ns, t+sep+id))
		t = token()
		add(join{sep: sep, idFirst: true}, ev(ns, id+sep+t), ev(t+sep+ns, id))
	}
	// An empty namespace, which some implementations refuse cleanly.
	t := token()
	add(join{}, ev("", ns+t), ev(ns, t))
	t = token()
	add(join{sep: ":"}, ev("", ns+":"+t), ev(":"+ns, t))
	return sameID, joined
}

// unambiguous judges namespace-isolation.unambiguous-identity. Every pair
// whose events were not refused must be two events. A pair with an event
// refused cleanly proves nothing, so every join must also be exposed by a
// pair whose events were both accepted; a join with a separator may instead
// be made unambiguous by refusing that separator, which every event of the
// pairs that expose it holds, but nothing makes a join without a separator
// unambiguous.
func unambiguous(plays []pairResult) (problems []string, note string) {
	for _, p := range plays {
		if pr := p.problem(); pr != "" {
			problems = append(problems, pr)
		}
	}
	var unexposed []string
	for _, j := range joins() {
		var refused []string
		exposed, failed := false, false
		for _, p := range plays {
			if j.key(p.a.ev) != j.key(p.b.ev) {
				continue
			}
			exposed = exposed || p.keptApart()
			failed = failed || p.problem() != ""
			for _, ev := range p.refused() {
				refused = append(refused, ev.String())
			}
		}
		switch {
		case exposed || failed: // judged pair by pair above
		case j.sep != "":
			unexposed = append(unexposed, j.String())
		default:
			problems = append(problems, fmt.Sprintf("no pair that %s would merge had both events accepted (refused cleanly: %s), so the rule cannot show that the key is not built that way; these are ordinary identities, and refusing a character cannot make such a join unambiguous",
				j, listed(refused)))
		}
	}
	note = pairsNote(plays)
	if len(unexposed) > 0 {
		note += "; not exposed, because an event holding the separator was refused in every pair that would show them (refusing the separator makes such a join unambiguous): " + strings.Join(unexposed, "; ")
	}
	return problems, note
}

// The ids of the fixture and its rules, written once, here: the
// catalogue and internal/catalogid are generated from the definition
// below. They are stable: labels, reports and other tools use them.
const (
	namespaceIsolationID = "namespace-isolation"

	namespaceIsolationSameIDTwoNamespaces = "namespace-isolation.same-id-two-namespaces"
	namespaceIsolationUnambiguousIdentity = "namespace-isolation.unambiguous-identity"
)

// namespaceIsolationDefinition is the fixture's catalogue entry, with
// its rules' reasons and usual suspects, and its page in docs/.
func namespaceIsolationDefinition() Definition {
	return Definition{
		Page: DocPage{File: "identity.md", Title: "identities"},
		Fixture: fixtures.Fixture{
			ID:  namespaceIsolationID,
			Doc: "Deliver the same id in two namespaces, and pairs of identities that one join of namespace and id into a single string would merge: for each separator (none, \"/\", \":\", \"|\", \".\", NUL, \"-\", \"_\", \"#\", \",\", \";\", a space, \"@\") and each order, such as (\"harmless:p5\", \"42\") and (\"harmless\", \"p5:42\"), or (\"harmlessp1\", \"42\") and (\"harmless\", \"p142\") for no separator; and two pairs with an empty namespace. Pairs are played eight at a time, the two events of a pair one after the other, on the two instances.",
			Rules: []fixtures.Rule{
				{
					ID: namespaceIsolationSameIDTwoNamespaces, Level: fixtures.Must,
					Doc:     "The same id in two namespaces is two events: both are Applied, two effects.",
					Reason:  seedNS,
					Suspect: "the unique key is the id alone",
				},
				{
					ID: namespaceIsolationUnambiguousIdentity, Level: fixtures.Must,
					Doc:     "Namespace and id are never joined ambiguously: each pair a join would merge is two events, two effects, unless one of its events is refused cleanly (ErrInvalidInput, no effect); a refused event proves nothing, so a join without a separator must be shown absent by a pair whose events were both accepted.",
					Reason:  seedNS + " A key built by concatenation (\"a:b\" + \"c\" = \"a\" + \"b:c\") merges events that are not the same. Refusing an identity the implementation cannot store is allowed everywhere (see bad-input), and refusing the separator in namespaces or ids does make a join with it unambiguous.",
					Suspect: "the key is namespace and id joined into one string, with or without a separator, or the id alone",
				},
			},
		},
	}
}

func (s *state) namespaceIsolation() {
	s.describeFixture(namespaceIsolationID, func() {
		var sameID pairResult
		var joined []pairResult
		same, pairs := namespacePairs()
		all := append([]identityPair{same}, pairs...)
		pn := s.play(namespaceIsolationID, pairWork(len(all), false))
		pn.gather(func(ctx context.Context) {
			play := pn.begin(ctx)
			pn.at("%d pairs, %d at a time", len(all), pairParallelism)
			plays := s.playPairs(ctx, play, all, false)
			sameID, joined = plays[0], plays[1:]
		})

		pn.rule(namespaceIsolationSameIDTwoNamespaces, func() []string {
			if p := sameID.problem(); p != "" {
				return []string{p}
			}
			if !sameID.keptApart() {
				return []string{fmt.Sprintf("%s: %s and %s are ordinary identities, and the rule needs both accepted to show that the namespace is part of the key; observed: %s: %s; %s: %s",
					sameID.pair.why, sameID.a.ev, sameID.b.ev, sameID.a.ev, sameID.a.summary(), sameID.b.ev, sameID.b.summary())}
			}
			return nil
		})
		pn.noteRule(namespaceIsolationUnambiguousIdentity, func() ([]string, string) {
			return unambiguous(joined)
		})
	})
}
