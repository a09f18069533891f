package suite

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/ledger"
)

// The tests in this file judge made-up deliveries: they check the rules'
// reasoning and the fixtures' identities without a database.

func applied(attempt int) harness.Attempt {
	return harness.Attempt{Delivery: adapters.Delivery{Attempt: attempt}, Outcome: adapters.Applied}
}

func answered(o adapters.Outcome, attempt int) harness.Attempt {
	return harness.Attempt{Delivery: adapters.Delivery{Attempt: attempt}, Outcome: o}
}

func failed(err error, attempt int) harness.Attempt {
	return harness.Attempt{Delivery: adapters.Delivery{Attempt: attempt}, Err: err}
}

var (
	errInvalid   = fmt.Errorf("empty namespace: %w", adapters.ErrInvalidInput)
	errTransient = errors.New("connection reset")
)

func effects(ev adapters.Event, n int) []ledger.Entry {
	var out []ledger.Entry
	for i := range n {
		out = append(out, ledger.Entry{Namespace: ev.Namespace, ID: ev.ID, Attempt: i + 1})
	}
	return out
}

// processed is an event applied once and then answered Duplicate.
func processed(ev adapters.Event) delivered {
	return delivered{ev: ev, first: []harness.Attempt{applied(1)}, again: []harness.Attempt{answered(adapters.Duplicate, 2)}, effects: effects(ev, 1)}
}

// refusedEvent is an event refused cleanly on both deliveries.
func refusedEvent(ev adapters.Event) delivered {
	return delivered{ev: ev, first: []harness.Attempt{failed(errInvalid, 1)}, again: []harness.Attempt{failed(errInvalid, 2)}}
}

func TestCleanRefusal(t *testing.T) {
	ev := adapters.Event{Namespace: "", ID: "x"}
	for _, c := range []struct {
		name     string
		d        delivered
		refused  bool
		once     bool
		badInput string // oddResult's verdict or issue
	}{
		{"applied once", processed(ev), false, true, "processed exactly once"},
		{"refused on every delivery", refusedEvent(ev), true, false, "rejected as invalid input"},
		{"refused once, not delivered again", delivered{ev: ev, first: []harness.Attempt{failed(errInvalid, 1)}}, true, false, ""},
		{"refused with an effect", delivered{ev: ev, first: []harness.Attempt{failed(errInvalid, 1)}, again: []harness.Attempt{failed(errInvalid, 2)}, effects: effects(ev, 1)}, false, false, "handled inconsistently"},
		{"a retryable error, then refused", delivered{ev: ev, first: []harness.Attempt{failed(errTransient, 1), failed(errInvalid, 2)}, again: []harness.Attempt{failed(errInvalid, 3)}}, false, false, "handled inconsistently"},
		{"refused, then applied", delivered{ev: ev, first: []harness.Attempt{failed(errInvalid, 1)}, again: []harness.Attempt{applied(2)}, effects: effects(ev, 1)}, false, false, "handled inconsistently"},
		{"applied by an attempt that timed out, then Duplicate", delivered{ev: ev, first: []harness.Attempt{failed(errTransient, 1), answered(adapters.Duplicate, 2)}, again: []harness.Attempt{answered(adapters.Duplicate, 3)}, effects: effects(ev, 1)}, false, true, "processed exactly once"},
		{"Duplicate first, the effect from an acknowledged attempt", delivered{ev: ev, first: []harness.Attempt{answered(adapters.Duplicate, 1)}, again: []harness.Attempt{answered(adapters.Duplicate, 2)}, effects: effects(ev, 1)}, false, false, "neither processed exactly once"},
		{"applied, then applied again", delivered{ev: ev, first: []harness.Attempt{applied(1)}, again: []harness.Attempt{applied(2)}, effects: effects(ev, 2)}, false, false, "applied 2 times"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.d.refusedCleanly(); got != c.refused {
				t.Errorf("refusedCleanly = %t; want %t", got, c.refused)
			}
			if got := c.d.processedOnce(); got != c.once {
				t.Errorf("processedOnce = %t; want %t", got, c.once)
			}
			if c.badInput == "" {
				return
			}
			r := oddResult{delivered: c.d}
			r.judge()
			if got := r.verdict + r.issue; !strings.Contains(got, c.badInput) {
				t.Errorf("bad-input judged %q; want %q", got, c.badInput)
			}
		})
	}
}

func TestPairJudgement(t *testing.T) {
	a := adapters.Event{Namespace: "ns", ID: "x\xff"}
	b := adapters.Event{Namespace: "ns", ID: "x\xfe"}
	merged := delivered{ev: b, first: []harness.Attempt{answered(adapters.Duplicate, 1)}, again: []harness.Attempt{answered(adapters.Duplicate, 2)}}
	conflict := merged
	conflict.first = []harness.Attempt{answered(adapters.Rejected, 1)}
	for _, c := range []struct {
		name    string
		play    pairResult
		kept    bool
		refused int
		says    []string // what the problem says, in order; none: no problem
	}{
		{"two events", pairResult{a: processed(a), b: processed(b)}, true, 0, nil},
		{"the second refused cleanly", pairResult{a: processed(a), b: refusedEvent(b)}, false, 1, nil},
		{"both refused cleanly", pairResult{a: refusedEvent(a), b: refusedEvent(b)}, false, 2, nil},
		{"the second answered Duplicate", pairResult{a: processed(a), b: merged}, false, 0,
			[]string{"Duplicate, redelivery Duplicate, 0 effects", "answered Duplicate of the first event, ns/\"x\\xff\": its effect is lost"}},
		{"the second answered Rejected", pairResult{a: processed(a), b: conflict}, false, 0,
			[]string{"Rejected, redelivery Duplicate, 0 effects", "as a conflicting copy of the first event, ns/\"x\\xff\": its effect is lost"}},
		{"the second refused, then applied", pairResult{a: processed(a), b: delivered{ev: b, first: []harness.Attempt{failed(errInvalid, 1)}, again: []harness.Attempt{applied(2)}, effects: effects(b, 1)}}, false, 0,
			[]string{"error: empty namespace: invalid input, redelivery Applied, 1 effect", "or a clean refusal"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.play.pair = identityPair{why: "the test pair", a: a, b: b}
			if got := c.play.keptApart(); got != c.kept {
				t.Errorf("keptApart = %t; want %t", got, c.kept)
			}
			if got := len(c.play.refused()); got != c.refused {
				t.Errorf("%d events refused; want %d", got, c.refused)
			}
			problem := c.play.problem()
			if (problem == "") != (c.says == nil) {
				t.Fatalf("problem %q; want one that says %q", problem, c.says)
			}
			rest := problem
			for _, s := range c.says {
				i := strings.Index(rest, s)
				if i < 0 {
					t.Fatalf("the problem does not say %q after what came before:\n%s", s, problem)
				}
				rest = rest[i+len(s):]
			}
		})
	}
}

// TestNamespacePairsExposeEveryJoin checks the fixture's design: every join
// merges a pair whose events both have a namespace and an id, and none
// merges events of two different pairs.
func TestNamespacePairsExposeEveryJoin(t *testing.T) {
	same, pairs := namespacePairs()
	all := append([]identityPair{same}, pairs...)
	seen := map[string]bool{}
	for _, p := range all {
		for _, ev := range []adapters.Event{p.a, p.b} {
			if seen[ev.String()] {
				t.Errorf("event %s is in two pairs", ev)
			}
			seen[ev.String()] = true
		}
	}
	for _, j := range joins() {
		exposed := false
		for i, p := range all {
			if j.key(p.a) == j.key(p.b) && p.a.Namespace != "" && p.b.Namespace != "" {
				exposed = true
			}
			for _, q := range all[i+1:] {
				for _, x := range []adapters.Event{p.a, p.b} {
					for _, y := range []adapters.Event{q.a, q.b} {
						if j.key(x) == j.key(y) {
							t.Errorf("%s merges %s and %s, of two different pairs", j, x, y)
						}
					}
				}
			}
		}
		if !exposed {
			t.Errorf("no pair with non-empty namespaces exposes %s", j)
		}
	}
}

// joinPlays plays the namespace pairs against a made-up implementation
// whose answer to each event is given by answer.
func joinPlays(answer func(ev adapters.Event) delivered) []pairResult {
	_, pairs := namespacePairs()
	var plays []pairResult
	for _, p := range pairs {
		plays = append(plays, pairResult{pair: p, a: answer(p.a), b: answer(p.b)})
	}
	return plays
}

func TestUnambiguousIdentity(t *testing.T) {
	// A key joined with sep: the second event of the pair it merges is a
	// Duplicate of the first.
	joinedWith := func(j join) func(adapters.Event) delivered {
		claimed := map[string]bool{}
		return func(ev adapters.Event) delivered {
			if claimed[j.key(ev)] {
				return delivered{ev: ev, first: []harness.Attempt{answered(adapters.Duplicate, 1)}}
			}
			claimed[j.key(ev)] = true
			return delivered{ev: ev, first: []harness.Attempt{applied(1)}, effects: effects(ev, 1)}
		}
	}
	refusing := func(refuse func(adapters.Event) bool) func(adapters.Event) delivered {
		return func(ev adapters.Event) delivered {
			if refuse(ev) {
				return delivered{ev: ev, first: []harness.Attempt{failed(errInvalid, 1)}}
			}
			return delivered{ev: ev, first: []harness.Attempt{applied(1)}, effects: effects(ev, 1)}
		}
	}
	holds := func(s string) func(adapters.Event) bool {
		return func(ev adapters.Event) bool { return strings.Contains(ev.Namespace+ev.ID, s) }
	}
	for _, j := range joins() {
		// Even an implementation that refuses an empty namespace catches
		// every join.
		emptyRefused, joined := refusing(func(ev adapters.Event) bool { return ev.Namespace == "" }), joinedWith(j)
		answer := func(ev adapters.Event) delivered {
			if ev.Namespace == "" {
				return emptyRefused(ev)
			}
			return joined(ev)
		}
		if problems, _ := unambiguous(joinPlays(answer)); len(problems) == 0 {
			t.Errorf("a key of %s, empty namespaces refused, passed", j)
		}
	}
	for _, c := range []struct {
		name   string
		refuse func(adapters.Event) bool
		fails  bool
		note   string
	}{
		{"nothing refused", func(adapters.Event) bool { return false }, false, "28 of 28 pairs kept apart"},
		{"an empty namespace refused", func(ev adapters.Event) bool { return ev.Namespace == "" }, false, "26 of 28 pairs kept apart"},
		{"NUL refused", holds("\x00"), false, `not exposed, because an event holding the separator was refused in every pair that would show them (refusing the separator makes such a join unambiguous): namespace and id joined with "\x00"; id and namespace joined with "\x00"`},
		{"every separator refused", func(ev adapters.Event) bool { return strings.ContainsAny(ev.Namespace+ev.ID, "/:|.\x00-_#,; @") }, false, "3 of 28 pairs kept apart"},
		{"every pair refused", func(adapters.Event) bool { return true }, true, "0 of 28 pairs kept apart"},
		{"the second event of every pair without a separator refused", func(ev adapters.Event) bool { return ev.ID == "p142" || ev.Namespace == "p2harmless" || ev.ID == "p27" }, true, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			problems, note := unambiguous(joinPlays(refusing(c.refuse)))
			if (len(problems) > 0) != c.fails {
				t.Errorf("problems %q; want some: %t", problems, c.fails)
			}
			if c.fails && !strings.Contains(strings.Join(problems, "\n"), "cannot show") {
				t.Errorf("problems %q do not say the rule cannot show anything", problems)
			}
			if !strings.Contains(note, c.note) {
				t.Errorf("note %q; want it to contain %q", note, c.note)
			}
		})
	}
}

// TestFidelityPairsMergeUnderRealKeys checks the fixture's design against
// the keys real code builds: each one merges a pair of the rule that
// names its bug, and never events of two different pairs.
func TestFidelityPairsMergeUnderRealKeys(t *testing.T) {
	jsonKey := func(ev adapters.Event) string {
		b, err := json.Marshal([]string{ev.Namespace, ev.ID})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	onID := func(f func(string) string) func(adapters.Event) string {
		return func(ev adapters.Event) string { return ev.Namespace + "\x00" + f(ev.ID) }
	}
	onBoth := func(f func(string) string) func(adapters.Event) string {
		return func(ev adapters.Event) string { return f(ev.Namespace) + "\x00" + f(ev.ID) }
	}
	// asciiLower is lower() in the C locale; Go's strings.ToLower would
	// also replace invalid UTF-8.
	asciiLower := func(s string) string {
		b := []byte(s)
		for i, c := range b {
			if 'A' <= c && c <= 'Z' {
				b[i] = c + 'a' - 'A'
			}
		}
		return string(b)
	}
	cString := func(s string) string { s, _, _ = strings.Cut(s, "\x00"); return s }
	numeric := func(s string) string {
		if n, err := strconv.Atoi(s); err == nil {
			return strconv.Itoa(n)
		}
		return s
	}
	truncate := func(s string) string {
		if utf8.RuneCountInString(s) > 64 {
			return string([]rune(s)[:64])
		}
		return s
	}
	for _, c := range []struct {
		bug   string
		key   func(adapters.Event) string
		rules []string
	}{
		{"a JSON key", jsonKey, []string{catalogid.IdentityFidelityBytesKept, catalogid.IdentityFidelityNamespaceKept}},
		{"invalid bytes decoded as U+FFFD", onBoth(func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }), []string{catalogid.IdentityFidelityBytesKept, catalogid.IdentityFidelityNamespaceKept}},
		{"a C string", onBoth(cString), []string{catalogid.IdentityFidelityBytesKept, catalogid.IdentityFidelityNamespaceKept}},
		{"lower() on the id", onID(asciiLower), []string{catalogid.IdentityFidelityTextKept}},
		{"trimmed", onBoth(strings.TrimSpace), []string{catalogid.IdentityFidelityTextKept, catalogid.IdentityFidelityNamespaceKept}},
		{"a number", onID(numeric), []string{catalogid.IdentityFidelityTextKept}},
		{"left(id, 64)", onID(truncate), []string{catalogid.IdentityFidelityLengthKept}},
		{"the id alone", func(ev adapters.Event) string { return ev.ID }, []string{catalogid.IdentityFidelityNamespaceKept}},
	} {
		merged := map[string]bool{}
		seen := map[string]string{} // key -> pair
		for _, r := range fidelityRules() {
			for _, p := range r.pairs {
				if p.a.Namespace == p.b.Namespace && p.a.ID == p.b.ID || string(p.a.Payload) != string(p.b.Payload) {
					t.Errorf("%s: pair %q is one event, or its events carry different payloads", r.id, p.why)
				}
				if c.key(p.a) == c.key(p.b) {
					merged[r.id] = true
				}
				for _, ev := range []adapters.Event{p.a, p.b} {
					if other, ok := seen[c.key(ev)]; ok && other != p.why {
						t.Errorf("%s merges %s of pair %q with an event of pair %q", c.bug, ev, p.why, other)
					}
					seen[c.key(ev)] = p.why
				}
			}
		}
		for _, r := range fidelityRules() {
			if want := slices.Contains(c.rules, r.id); merged[r.id] != want {
				t.Errorf("%s merges a pair of %s: %t; want %t", c.bug, r.id, merged[r.id], want)
			}
		}
	}
}
