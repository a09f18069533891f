package suite

import (
	"flag"
	"regexp"
	"strings"

	"github.com/harmless-dev/harmless/fixtures"
)

// selectedRules returns the ids of the rules whose subtests go test's
// -test.run and -test.skip let run, below the test named test (and the
// subtest adapter, when it is not ""), and whether that is every rule. Go
// decides whether a subtest runs only when it is started, which RunWith
// does once the suite has run; reading the flags the way package testing
// matches them lets the suite play only the rules whose verdicts will be
// reported, so that -run TestX/double-delivery plays one fixture, not all,
// and -run TestX/double-delivery/one-effect one rule.
// A pattern that is not a valid regular expression selects every rule:
// package testing has refused it already.
func selectedRules(test, adapter string) (ids []string, all bool) {
	run, skip := flagValue("test.run"), flagValue("test.skip")
	all = true
	for _, r := range fixtures.Rules() {
		name := strings.Split(test, "/")
		if adapter != "" {
			name = append(name, adapter)
		}
		name = append(name, r.Fixture, ruleSubtest(r.ID, r.Fixture))
		ok, _ := matchPath(run, name, true)
		skipped, partial := matchPath(skip, name, false)
		if ok && !(skipped && !partial) {
			ids = append(ids, r.ID)
		} else {
			all = false
		}
	}
	return ids, all
}

// flagValue is the value of the flag name of the test binary, "" when it
// has none.
func flagValue(name string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// matchPath reports whether the subtest name (its elements, from the top
// test down) matches pattern as package testing matches -test.run and
// -test.skip, and whether only partly (the pattern has more elements than
// the name). An empty pattern matches with empty.
func matchPath(pattern string, name []string, empty bool) (ok, partial bool) {
	if pattern == "" {
		return empty, false
	}
	for _, alt := range splitPattern(pattern) {
		if ok, partial = matchElements(alt, name); ok {
			return ok, partial
		}
	}
	return false, false
}

// matchElements matches each element of name against the pattern's element
// at its level, unanchored, as package testing does.
func matchElements(pattern, name []string) (ok, partial bool) {
	for i, s := range name {
		if i >= len(pattern) {
			break
		}
		re, err := regexp.Compile(pattern[i])
		if err != nil || !re.MatchString(s) {
			return err != nil, false
		}
	}
	return true, len(name) < len(pattern)
}

// splitPattern splits a -test.run pattern as package testing does: into
// alternatives at a top-level '|', each into elements at a top-level '/';
// neither splits inside brackets or parentheses, nor after a backslash.
func splitPattern(s string) [][]string {
	var alts [][]string
	var elems []string
	brackets, parens := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			brackets++
		case ']':
			brackets = max(brackets-1, 0)
		case '(':
			if brackets == 0 {
				parens++
			}
		case ')':
			if brackets == 0 {
				parens--
			}
		case '\\':
			i++
		case '/', '|':
			if brackets == 0 && parens == 0 {
				elems = append(elems, s[:i])
				if s[i] == '|' {
					alts, elems = append(alts, elems), nil
				}
				s, i = s[i+1:], -1
			}
		}
	}
	return append(alts, append(elems, s))
}
