package verdictmatrix

import (
	"fmt"
	"strings"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/matrix"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// Compare compares a certificate with the verdict matrix's row for its
// adapter and returns every difference, each naming the adapter, the
// fixture and the rule. No difference means the suite judged the adapter as
// the matrix demands.
//
// Every cell is compared: a rule that did not run (not-supported or
// skipped) in a fixture the adapter must pass is a difference, so the
// certificate must come from a run of every rule on a server the harness
// owns.
func Compare(cert certificate.Certificate, row matrix.Row) []string {
	var diffs []string
	if cert.Error != "" {
		return []string{fmt.Sprintf("adapter %s: the run did not start: %s", cert.Adapter, cert.Error)}
	}
	byFixture := map[string][]certificate.RuleResult{}
	for _, r := range cert.Rules {
		byFixture[r.Fixture] = append(byFixture[r.Fixture], r)
	}
	for _, f := range fixtures.Catalog() {
		rules := byFixture[f.ID]
		switch row.Expect(f.ID) {
		case matrix.MustPass:
			for _, r := range rules {
				if r.Verdict != certificate.VerdictPass {
					line, _, _ := strings.Cut(r.Message, "\n")
					diffs = append(diffs, fmt.Sprintf("adapter %s, fixture %s, rule %s: verdict %s, but the matrix says the fixture must pass: %s",
						cert.Adapter, f.ID, r.ID, r.Verdict, line))
				}
			}
		case matrix.NotApplicable:
			for _, r := range rules {
				if r.Verdict != certificate.VerdictNotApplicable {
					line, _, _ := strings.Cut(r.Message, "\n")
					diffs = append(diffs, fmt.Sprintf("adapter %s, fixture %s, rule %s: verdict %s, but the matrix says the fixture does not apply: %s",
						cert.Adapter, f.ID, r.ID, r.Verdict, line))
				}
			}
		case matrix.MustFail:
			var failed []string
			for _, r := range rules {
				if r.Level == fixtures.Must && r.Verdict == certificate.VerdictFail {
					failed = append(failed, r.ID)
				}
			}
			if len(failed) == 0 {
				var got []string
				for _, r := range rules {
					got = append(got, fmt.Sprintf("rule %s: %s", r.ID, r.Verdict))
				}
				diffs = append(diffs, fmt.Sprintf("adapter %s, fixture %s: no MUST rule failed, but the matrix says the fixture must fail (%s)",
					cert.Adapter, f.ID, strings.Join(got, "; ")))
			}
		}
	}
	want := certificate.StatusCertified
	if len(row.MustFail) > 0 {
		want = certificate.StatusNotCertified
	}
	if cert.Status != want || cert.Certified != (want == certificate.StatusCertified) {
		diffs = append(diffs, fmt.Sprintf("adapter %s: status %s (certified %t), but the matrix says it must be %s", cert.Adapter, cert.Status, cert.Certified, want))
	}
	return diffs
}
