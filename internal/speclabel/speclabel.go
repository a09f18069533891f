// Package speclabel makes the Ginkgo labels of harmless's specs:
// fixture:ID, rule:ID and level:MUST or level:SHOULD. The Ginkgo layer of
// internal/suite puts them on the specs, and the command matches
// --label-filter against them to know which rules a run selects, so the
// two agree on one spelling. Users write them in label filters as the
// docs show (docs/go.md, docs/command.md).
package speclabel

import "github.com/harmless-dev/harmless/fixtures"

// Fixture is the label every spec of the fixture id carries.
func Fixture(id string) string { return "fixture:" + id }

// Rule is the label of the specs that check the rule id.
func Rule(id string) string { return "rule:" + id }

// Level is the label of the specs of the rules of level l.
func Level(l fixtures.Level) string { return "level:" + string(l) }

// Of returns the labels of the spec that checks r: its fixture's, its own
// and its level's.
func Of(r fixtures.Rule) []string {
	return []string{Fixture(r.Fixture), Rule(r.ID), Level(r.Level)}
}
