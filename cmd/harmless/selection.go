package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/speclabel"
)

// selection is which rules a certify run is asked to run: a Ginkgo label
// filter, fixture ids and rule ids. The ids are plain alternatives to the
// filter's syntax: a run selects the rules of the fixtures and the rules
// they name, and of those, the ones the filter matches.
type selection struct {
	labelFilter string // as typed
	fixtures    []string
	rules       []string
}

// filter is the Ginkgo label filter that selects s, "" to run everything.
func (s selection) filter() string {
	var ids []string
	for _, id := range s.fixtures {
		ids = append(ids, speclabel.Fixture(id))
	}
	for _, id := range s.rules {
		ids = append(ids, speclabel.Rule(id))
	}
	if len(ids) == 0 {
		// As typed: wrapping it could change how Ginkgo reads it (an
		// unterminated /regexp/ would swallow the closing parenthesis).
		return s.labelFilter
	}
	var parts []string
	if s.labelFilter != "" {
		parts = append(parts, "("+s.labelFilter+")")
	}
	if len(ids) > 0 {
		parts = append(parts, "("+strings.Join(ids, " || ")+")")
	}
	return strings.Join(parts, " && ")
}

// selected returns the ids of the rules s selects, nil when it selects
// every rule. The labels are read with Ginkgo's label filter syntax, which
// --label-filter documents; the suite itself knows only the ids.
func (s selection) selected() []string {
	filter := s.filter()
	if filter == "" {
		return nil
	}
	match, err := types.ParseLabelFilter(filter)
	if err != nil {
		return []string{} // check refused it before the run
	}
	ids := []string{}
	for _, r := range fixtures.Rules() {
		if match(speclabel.Of(r)) {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// check refuses a selection that runs no rule. Ginkgo would skip every
// spec and the run would be PARTIAL with no warning, which hides a typo in
// a CI job's filter for as long as nobody reads the counts.
func (s selection) check() error {
	if s.labelFilter != "" {
		if _, err := types.ParseLabelFilter(s.labelFilter); err != nil {
			return fmt.Errorf("--label-filter %q: %s", s.labelFilter, plainFilterError(err))
		}
	}
	filter := s.filter()
	if filter == "" {
		return nil
	}
	match, err := types.ParseLabelFilter(filter)
	if err != nil {
		return fmt.Errorf("--label-filter %q cannot be combined with --fixture or --rule (as %q): %s", s.labelFilter, filter, plainFilterError(err))
	}
	for _, r := range fixtures.Rules() {
		if match(speclabel.Of(r)) {
			return nil
		}
	}
	what := fmt.Sprintf("--label-filter %q", s.labelFilter)
	switch {
	case s.labelFilter == "":
		what = "--fixture and --rule"
	case len(s.fixtures)+len(s.rules) > 0:
		what += " with --fixture and --rule"
	}
	return fmt.Errorf("%s selects no rule, so nothing would run%s (known fixtures: %s; labels: fixture:ID, rule:ID, level:MUST, level:SHOULD; see 'harmless list')",
		what, labelHints(s.labelFilter), strings.Join(fixtureIDs(), ", "))
}

// labelToken is a label a filter names, e.g. fixture:double-delivery.
var labelToken = regexp.MustCompile(`(?:fixture|rule|level):[^\s&|!,()/{}]+`)

// labelHints is "; did you mean X?", X naming, for each label of filter
// that no rule carries, one that a rule carries and that is nearly the
// same.
func labelHints(filter string) string {
	var known []string
	for _, r := range fixtures.Rules() {
		known = append(known, speclabel.Of(r)...)
	}
	var hints []string
	for _, label := range labelToken.FindAllString(filter, -1) {
		if c := closest(label, known); c != "" {
			hints = append(hints, c)
		}
	}
	if len(hints) == 0 {
		return ""
	}
	return "; did you mean " + strings.Join(hints, ", ") + "?"
}

// fixtureIDs are the ids of the fixtures, in the catalogue's order.
func fixtureIDs() []string {
	var ids []string
	for _, f := range fixtures.Catalog() {
		ids = append(ids, f.ID)
	}
	return ids
}

// ruleIDs are the ids of the rules, in the catalogue's order.
func ruleIDs() []string {
	var ids []string
	for _, r := range fixtures.Rules() {
		ids = append(ids, r.ID)
	}
	return ids
}

// ansiEscape matches the terminal colour codes Ginkgo's errors carry.
var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*m")

// plainFilterError is Ginkgo's label filter error on one line, without the
// colour codes it carries whatever the output is, and with the control
// characters of the filter it quotes escaped as %q would: a filter with an
// escape character must not reach the terminal raw.
func plainFilterError(err error) string {
	var b strings.Builder
	for _, r := range ansiEscape.ReplaceAllString(err.Error(), "") {
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(' ')
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}
