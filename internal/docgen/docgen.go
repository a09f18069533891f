// Package docgen writes what is generated from the fixtures' definitions
// (internal/suite) and the registry of built-in adapters
// (internal/adapters/builtin): the catalogue of package fixtures and the
// ids of internal/catalogid, as Go (Code), then the rule table in
// README.md, the verdict matrix in docs/proof.md and the rules page
// docs/rules.md, with each fixture's page from its definition. Run
// `go generate ./...` after changing a fixture; tests fail while any of
// these files is stale.
package docgen

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/applicability"
	"github.com/harmless-dev/harmless/internal/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// Markers delimit the generated rule table in README.md.
const (
	BeginRules = "<!-- BEGIN GENERATED RULES: go generate ./... -->"
	EndRules   = "<!-- END GENERATED RULES -->"
)

// RulesTable is the Markdown table of every rule, for the README.
func RulesTable() string {
	var b strings.Builder
	b.WriteString("| rule | level | checks |\n|---|---|---|\n")
	for _, r := range fixtures.Rules() {
		fmt.Fprintf(&b, "| [`%s`](docs/rules.md#%s) | %s | %s |\n", r.ID, anchor(r.ID), r.Level, escape(r.Doc))
	}
	return b.String()
}

// RulesPage is docs/rules.md: every fixture and rule, what it checks and
// why.
func RulesPage() string {
	var b strings.Builder
	b.WriteString("# Rules\n\n")
	b.WriteString("<!-- Generated from package fixtures by `go generate ./...`. Do not edit. -->\n\n")
	b.WriteString("Every rule has a stable id, a level and a reason. MUST rules decide certification: a run is CERTIFIED when every MUST rule ran and passed, PARTIAL when no rule failed but some MUST rules did not run (not-supported where the run was made, or left out by a filter), and NOT CERTIFIED when a rule failed. Each spec carries the Ginkgo labels `fixture:<fixture id>` and `rule:<rule id>`, so `--label-filter` selects either.\n\n")
	b.WriteString("Every rule judges what an implementation does, seen from outside: its answers (Applied, Duplicate, Rejected, an error), each checked against the harness's ledger of effects the moment it is given, the effects in the ledger, the requests at the destination, the crashes of its processes. How it gets there (an error returned, a retry inside the delivery, the statements it sends, the names it gives its connections) never fails a rule: it decides only whether a play exercised what it claims to. A play whose fault did not fire proves nothing, and its rules are not-supported there unless its answers or its ledger are wrong anyway. [broker.md](broker.md#what-an-answer-promises) says what each answer promises. A rule whose meaning changed while its id stayed says so, under **Changed**.\n\n")
	b.WriteString("Some fixtures, and some variants of a fixture, need something of the implementation or of the run (their needs are listed under them); `harmless list --adapter NAME` (or `--exec COMMAND`, with the database flags of certify) says before a run which rules will run and why the others cannot.\n\n")
	b.WriteString("The quotations are from the pattern this harness checks, *Make duplicate delivery harmless*.\n\n")
	b.WriteString("What a run creates and drops on a database you name, and the privileges it needs there: [safety.md](safety.md).\n\n")
	pages := map[string]suite.DocPage{}
	for _, d := range suite.Definitions() {
		pages[d.Fixture.ID] = d.Page
	}
	for _, f := range fixtures.Catalog() {
		fmt.Fprintf(&b, "## Fixture `%s`\n\n%s\n\n", f.ID, f.Doc)
		if page := pages[f.ID]; page.File != "" {
			fmt.Fprintf(&b, "More: [%s](%s).\n\n", page.Title, page.File)
		}
		for _, r := range f.Requires {
			fmt.Fprintf(&b, "**Needs `%s`:** %s. Without it the fixture's rules are not-supported.\n\n", r, applicability.Doc(r))
		}
		for _, v := range f.Variants {
			for _, r := range v.Requires {
				fmt.Fprintf(&b, "**The variant `%s` (%s) needs `%s`:** %s. Without it that variant is not played, and the rules are judged on the others.\n\n", v.ID, v.Name, r, applicability.Doc(r))
			}
		}
		for _, r := range f.Rules {
			fmt.Fprintf(&b, "### %s\n\n", r.ID)
			fmt.Fprintf(&b, "- **Level:** %s\n- **Checks:** %s\n- **Why:** %s\n", r.Level, r.Doc, r.Reason)
			if r.Suspect != "" {
				fmt.Fprintf(&b, "- **A failure usually means:** %s.\n", r.Suspect)
			}
			if r.Changed != "" {
				fmt.Fprintf(&b, "- **Changed:** %s\n", r.Changed)
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// SpliceReadme replaces the generated part of README.md, the rule table,
// with its current text.
func SpliceReadme(readme string) (string, error) {
	return splice(readme, BeginRules, EndRules, RulesTable())
}

// SpliceProof replaces the generated part of docs/proof.md, the verdict
// matrix, with its current text.
func SpliceProof(page string) (string, error) {
	return splice(page, BeginMatrix, EndMatrix, MatrixTable())
}

func splice(text, beginMarker, endMarker, content string) (string, error) {
	begin := strings.Index(text, beginMarker)
	end := strings.Index(text, endMarker)
	if begin < 0 || end < begin {
		return "", fmt.Errorf("the markers %q and %q are missing or out of order", beginMarker, endMarker)
	}
	return text[:begin+len(beginMarker)] + "\n" + content + text[end:], nil
}

// anchor is GitHub's heading anchor for a rule id heading.
func anchor(id string) string {
	return strings.ReplaceAll(strings.ToLower(id), ".", "")
}

// onFormationOnly reports whether f applies to e only on a replicated
// formation: not-applicable on one server, applicable there.
func onFormationOnly(e builtin.Entry, f fixtures.Fixture) bool {
	na := []certificate.Verdict{certificate.VerdictNotApplicable}
	single, _ := e.AllowedOn(f.Rules[0], builtin.SingleServer)
	formation, _ := e.AllowedOn(f.Rules[0], builtin.Formation)
	return slices.Equal(single, na) && !slices.Equal(formation, na)
}

func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Markers delimit the generated verdict matrix in docs/proof.md.
const (
	BeginMatrix = "<!-- BEGIN GENERATED MATRIX: go generate ./... -->"
	EndMatrix   = "<!-- END GENERATED MATRIX -->"
)

// MatrixTable is the verdict matrix as a Markdown table: one row per
// built-in adapter, one column per fixture, each cell naming the rules of
// the fixture the adapter must fail, from the registry of built-in
// adapters (internal/adapters/builtin).
func MatrixTable() string {
	var b strings.Builder
	b.WriteString("| adapter |")
	for _, f := range fixtures.Catalog() {
		fmt.Fprintf(&b, " `%s` |", f.ID)
	}
	b.WriteString(" models |\n|---|")
	for range fixtures.Catalog() {
		b.WriteString("---|")
	}
	b.WriteString("---|\n")
	for _, e := range builtin.Entries() {
		fmt.Fprintf(&b, "| `%s` |", e.Adapter.Name)
		for _, f := range fixtures.Catalog() {
			fmt.Fprintf(&b, " %s |", matrixCell(e, f))
		}
		fmt.Fprintf(&b, " %s |\n", escape(e.Models))
	}
	var moved []string
	for _, e := range builtin.Entries() {
		for _, id := range slices.Sorted(maps.Keys(e.Moved)) {
			moved = append(moved, fmt.Sprintf("- `%s`, `%s`: %s.", e.Adapter.Name, id, escape(e.Moved[id])))
		}
	}
	if len(moved) > 0 {
		b.WriteString("\nVerdicts that moved when a rule's meaning changed ([rules.md](rules.md) says how each rule changed):\n\n" + strings.Join(moved, "\n") + "\n")
	}
	return b.String()
}

// matrixCell is what entry demands on fixture f, on the deployment the
// fixture is played on (one server, or for failover a replicated
// formation): "pass", "n/a", "not run" (an adapter whose verdicts on a
// formation are not checked), or **FAIL** with the rules that must fail,
// then those that may, each by the part of its id after the fixture's.
func matrixCell(e builtin.Entry, f fixtures.Fixture) string {
	on := builtin.SingleServer
	if onFormationOnly(e, f) {
		if !e.OnFormation {
			return "not run"
		}
		on = builtin.Formation
	}
	var fail, may []string
	applies := false
	for _, r := range f.Rules {
		allowed, _ := e.AllowedOn(r, on)
		short := strings.TrimPrefix(r.ID, f.ID+".")
		switch {
		case slices.Equal(allowed, []certificate.Verdict{certificate.VerdictFail}):
			fail = append(fail, short)
		case slices.Contains(allowed, certificate.VerdictFail):
			may = append(may, short)
		}
		applies = applies || !slices.Equal(allowed, []certificate.Verdict{certificate.VerdictNotApplicable})
	}
	cell := "pass"
	switch {
	case !applies:
		cell = "n/a"
	case len(fail) == len(f.Rules):
		cell = "**FAIL**: all"
	case len(fail) > 0:
		cell = "**FAIL**: " + strings.Join(fail, ", ")
	}
	if len(may) > 0 {
		cell += "; may fail: " + strings.Join(may, ", ")
	}
	return cell
}
