package suite

import (
	"context"
	"fmt"
	"strings"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
)

// twin is two strings that differ only where a lossy encoding, a collation,
// normalisation, case folding, trimming or truncation makes them equal.
type twin struct {
	why  string
	x, y string
}

// The twins of the fixture. No string is in two twins, so that no key, not
// even one that ignores the namespace, merges events of two pairs.

// byteTwins differ in bytes that are not text, or not the same text.
func byteTwins() []twin {
	return []twin{
		{"an invalid UTF-8 byte, 0xff against 0xfe (a lossy encoding, such as Go's encoding/json, replaces both with U+FFFD)", "a\xff", "a\xfe"},
		{"an invalid UTF-8 byte against U+FFFD, the character a lossy decoding replaces it with", "b\xff", "b\uFFFD"},
		{"the encoding of \"café\", UTF-8 against Latin-1 (a transcoding that guesses the encoding)", "caf\u00e9", "caf\xe9"},
		{"a trailing NUL (a C string ends at the NUL)", "d", "d\x00"},
	}
}

// textTwins are different texts that some comparison calls equal.
func textTwins() []twin {
	return []twin{
		{"the Unicode normalisation of \"résumé\", NFC against NFD", "r\u00e9sum\u00e9", "re\u0301sume\u0301"},
		{"letter case (case folding: lower(), citext, a case-insensitive collation)", "Order-7", "order-7"},
		{"an accent (an accent-insensitive collation)", "na\u00efve", "naive"},
		{"a trailing space (trimming, CHAR(n), a PAD SPACE collation)", "e", "e "},
		{"a leading space (trimming)", "f", " f"},
		{"leading zeros (an id parsed as a number)", "007", "7"},
	}
}

// sharedPrefixes are the lengths of the prefix the long twins share:
// PostgreSQL's identifier length (63 bytes), common column widths
// (varchar(64), varchar(255), varchar(256)) and the largest identity the
// reference stores (1024 bytes).
var sharedPrefixes = []int{63, 64, 255, 256, 1024}

// lengthTwins share their first n bytes and differ in the next, the last.
func lengthTwins() []twin {
	var out []twin
	for _, n := range sharedPrefixes {
		prefix := strings.Repeat("k", n)
		out = append(out, twin{fmt.Sprintf("their last byte, 'a' against 'b', after %d shared ones (truncation to %d bytes or characters)", n, n), prefix + "a", prefix + "b"})
	}
	return out
}

// fidelityRule is one rule of the identity-fidelity fixture and its pairs.
type fidelityRule struct {
	id    string
	pairs []identityPair
}

// fidelityRules returns the fixture's rules with their pairs. The twins of
// the first three rules are ids in a namespace of the pair's own; the last
// rule's are namespaces, every twin of the others, with an id of the pair's
// own. Both events of a pair carry the same payload, so that a merge shows
// as what it is in real code: a silent Duplicate, not a payload conflict.
func fidelityRules() []fidelityRule {
	n := 0
	pair := func(why string, a, b adapters.Event) identityPair {
		n++
		payload := fmt.Appendf(nil, `{"fixture":%q,"pair":%d}`, identityFidelityID, n)
		a.Payload, b.Payload = payload, payload
		return identityPair{why: why, a: a, b: b}
	}
	inID := func(twins []twin) []identityPair {
		var out []identityPair
		for _, t := range twins {
			ns := fmt.Sprintf("harmless.%s.%d", identityFidelityID, n+1)
			out = append(out, pair("ids that differ only in "+t.why, adapters.Event{Namespace: ns, ID: t.x}, adapters.Event{Namespace: ns, ID: t.y}))
		}
		return out
	}
	bytes, text, length := inID(byteTwins()), inID(textTwins()), inID(lengthTwins())
	var inNamespace []identityPair
	for _, t := range append(append(byteTwins(), textTwins()...), lengthTwins()...) {
		id := fmt.Sprintf("%s-%d", identityFidelityID, n+1)
		inNamespace = append(inNamespace, pair("namespaces that differ only in "+t.why, adapters.Event{Namespace: t.x, ID: id}, adapters.Event{Namespace: t.y, ID: id}))
	}
	return []fidelityRule{
		{identityFidelityBytesKept, bytes},
		{identityFidelityTextKept, text},
		{identityFidelityLengthKept, length},
		{identityFidelityNamespaceKept, inNamespace},
	}
}

// kept judges one rule of the fixture: every pair is two events, or has an
// event refused cleanly.
func kept(plays []pairResult) (problems []string, note string) {
	for _, p := range plays {
		if pr := p.problem(); pr != "" {
			problems = append(problems, pr)
		}
	}
	return problems, pairsNote(plays)
}

// The ids of the fixture and its rules, written once, here: the
// catalogue and internal/catalogid are generated from the definition
// below. They are stable: labels, reports and other tools use them.
const (
	identityFidelityID = "identity-fidelity"

	identityFidelityBytesKept     = "identity-fidelity.bytes-kept"
	identityFidelityTextKept      = "identity-fidelity.text-kept"
	identityFidelityLengthKept    = "identity-fidelity.length-kept"
	identityFidelityNamespaceKept = "identity-fidelity.namespace-kept"
)

// identityFidelityDefinition is the fixture's catalogue entry, with
// its rules' reasons and usual suspects, and its page in docs/.
func identityFidelityDefinition() Definition {
	return Definition{
		Page: DocPage{File: "identity.md", Title: "identities"},
		Fixture: fixtures.Fixture{
			ID:  identityFidelityID,
			Doc: "Deliver pairs of distinct identities that differ only where lossy encodings, collations, normalisation, case folding, trimming and truncation merge them: ids that differ in an invalid UTF-8 byte, in a trailing NUL, in UTF-8 against Latin-1; in Unicode normalisation (NFC against NFD), letter case, an accent, a leading or trailing space, leading zeros; ids of 64 to 1025 bytes that share all but their last byte; and every one of these splits in the namespace instead. Both events of a pair carry the same payload. The first goes to instance 1, the second then to instance 2, and each is delivered once more to the same instance. Pairs are played eight at a time. bad-input sends each odd identity alone and cannot see a merge; this fixture sends them in pairs.",
			Rules: []fixtures.Rule{
				{
					ID: identityFidelityBytesKept, Level: fixtures.Must,
					Doc:     "Ids that differ in bytes (an invalid UTF-8 byte, a trailing NUL, UTF-8 against Latin-1) stay two events: each is Applied once and then Duplicate, or refused cleanly; neither is ever answered as a Duplicate of the other.",
					Reason:  seedClaim + " The identity is the bytes the broker delivered. A key built from a lossy encoding of them (JSON replaces each invalid UTF-8 byte with U+FFFD) or cut at a NUL merges events that are not the same, and the second one's effect is lost without an error. An identity the implementation cannot store faithfully must be refused, as bad-input allows, never stored as something else.",
					Suspect: "the key is a lossy encoding of the identity (JSON or text with invalid bytes replaced), or a C string cut at the NUL",
				},
				{
					ID: identityFidelityTextKept, Level: fixtures.Must,
					Doc:     "Ids that are different strings but equal under some text comparison (NFC against NFD, letter case, an accent, a leading or trailing space, leading zeros) stay two events, or one of them is refused cleanly; neither is answered as a Duplicate of the other.",
					Reason:  seedClaim + " Identities are compared as the bytes they are: a case-insensitive or accent-insensitive collation, lower(), a normalisation, trimming or a numeric cast in the key decides that two events are one, and drops the second.",
					Suspect: "the key is case-folded (lower(), citext, a case-insensitive collation), normalised, trimmed, padded (CHAR(n)) or parsed as a number",
				},
				{
					ID: identityFidelityLengthKept, Level: fixtures.Must,
					Doc:     "Long ids that share their first 63, 64, 255, 256 or 1024 bytes and differ in the last stay two events, or are refused cleanly; a long id is never cut to fit.",
					Reason:  seedClaim + " A key column narrower than the identity (varchar(64), left(id, 64), an identifier of 63 bytes) makes every id that shares the kept prefix one event. An identity too long to store must be refused, as bad-input allows.",
					Suspect: "the key is cut to a fixed length: left(id, n), a cast to varchar(n), a column or index that truncates",
				},
				{
					ID: identityFidelityNamespaceKept, Level: fixtures.Must,
					Doc:     "Namespaces that differ in any of those ways stay two events with the same id, or one of them is refused cleanly.",
					Reason:  seedNS + " The namespace is half of the identity and goes through the same encodings, collations and columns as the id.",
					Suspect: "the namespace is encoded, folded, normalised, trimmed or cut on its way into the key",
				},
			},
		},
	}
}

func (s *state) identityFidelity() {
	s.describeFixture(identityFidelityID, func() {
		rules := fidelityRules()
		plays := make([][]pairResult, len(rules))
		var all []identityPair
		for _, r := range rules {
			all = append(all, r.pairs...)
		}
		pn := s.play(identityFidelityID, pairWork(len(all), true))
		pn.gather(func(ctx context.Context) {
			play := pn.begin(ctx)
			pn.at("%d pairs, %d at a time", len(all), pairParallelism)
			played := s.playPairs(ctx, play, all, true)
			for i, r := range rules {
				plays[i], played = played[:len(r.pairs)], played[len(r.pairs):]
			}
		})

		for i, r := range rules {
			pn.noteRule(r.id, func() ([]string, string) { return kept(plays[i]) })
		}
	})
}
