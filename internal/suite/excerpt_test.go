package suite

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/failuremsg"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// failedRule returns the certificate's result for rule id when the specs
// of variants failed with the given problems each, as state.judge records
// them (with an excerpt, the whole message in the spec's record) and
// verdict folds them.
func failedRule(t *testing.T, id string, variants map[string][]string) certificate.RuleResult {
	t.Helper()
	r, err := fixtures.Lookup(id)
	if err != nil {
		t.Fatal(err)
	}
	var specs []*specRecord
	for _, variant := range []string{"plain", "with a hold after the claim"} {
		problems, ok := variants[variant]
		if !ok {
			continue
		}
		msg := failureMessage(r, judgement{problems: problems})
		specs = append(specs, &specRecord{
			rule:    r,
			where:   r.Fixture + " / " + variant,
			state:   specFailed,
			message: msg,
			judged:  judgement{problems: problems},
			checked: true,
		})
	}
	results := ruleResults([]fixtures.Rule{r}, specs)
	if len(results) != 1 || results[0].Verdict != certificate.VerdictFail {
		t.Fatalf("results %+v; want one failed rule", results)
	}
	return results[0]
}

// roundProblems returns n problems like concurrent-delivery's, each of
// several lines, the third with an error that quotes a 1 MiB id.
func roundProblems(kind string, n int) []string {
	var problems []string
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("%s-%d-1", kind, i)
		err := "error: claim failed"
		if i == 3 {
			err = fmt.Sprintf("error: cannot handle id %q (quoted whole)", strings.Repeat("m", 1<<20))
		}
		problems = append(problems, fmt.Sprintf("round %d (%s, 16 contenders): event harmless.concurrent-delivery/%s applied 2 times (by attempt 1, 2); 16 deliveries:\n"+
			"  Applied: 2, attempt 1 (instance 1), 2 (instance 2)\n  Duplicate: 13, attempt 3 (instance 1), and 12 more\n  %s: 1, attempt 16 (instance 2)\nno fault was planned", i, kind, id, err))
	}
	return problems
}

// TestCertificateKeepsEveryProblem: the certificate's message holds every
// problem a check found, each line bounded, a long one cut in its middle.
func TestCertificateKeepsEveryProblem(t *testing.T) {
	r := failedRule(t, catalogid.ConcurrentDeliveryOneEffect, map[string][]string{
		"plain":                       roundProblems("plain", 20),
		"with a hold after the claim": roundProblems("overlap", 10),
	})
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back certificate.RuleResult
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	for kind, n := range map[string]int{"plain": 20, "overlap": 10} {
		for i := 1; i <= n; i++ {
			want := fmt.Sprintf("\n- round %d (%s, 16 contenders)", i, kind)
			if !strings.Contains(back.Message, want) {
				t.Errorf("the certificate lost the problem %q", want)
			}
		}
	}
	if got := strings.Count(back.Message, "This usually means"); got != 1 {
		t.Errorf("%d lines say what the failure usually means; want one for the rule, after its variants", got)
	}
	cut := 0
	for line := range strings.SplitSeq(back.Message, "\n") {
		if len(line) > failuremsg.MaxLine {
			t.Errorf("a line of %d bytes; want at most %d", len(line), failuremsg.MaxLine)
		}
		if strings.Contains(line, "bytes left out") {
			cut++
			if !strings.HasPrefix(strings.TrimLeft(line, " "), "error: cannot handle id \"mmm") || !strings.HasSuffix(line, "mmm\" (quoted whole): 1, attempt 16 (instance 2)") {
				t.Errorf("a cut line lost its start or its end: %.100q … %q", line, line[max(0, len(line)-100):])
			}
		}
	}
	if cut != 2 {
		t.Errorf("%d lines cut; want the two that quote a 1 MiB id", cut)
	}
	if len(data) > 200<<10 {
		t.Errorf("the rule's JSON takes %d bytes; want a certificate of reasonable size", len(data))
	}
}

// What RuleResult.Excerpt documents: no line of an excerpt is longer than
// excerptLine bytes, and a problem shows at most excerptProblemLines lines.
const (
	excerptLine         = 400
	excerptProblemLines = 6
)

var moreProblems = regexp.MustCompile(`^- … and (\d+) more problems?; see the JSON$`)

// TestExcerptIsShort: an excerpt shows each variant's header and its first
// problems, then how many problems it left out, and the bug the rule's
// failure usually means, in at most the lines asked for, none of them long.
func TestExcerptIsShort(t *testing.T) {
	const hint = "see the JSON"
	r := failedRule(t, catalogid.ConcurrentDeliveryOneEffect, map[string][]string{
		"plain":                       roundProblems("plain", 20),
		"with a hold after the claim": roundProblems("overlap", 10),
	})
	for _, maxLines := range []int{certificate.ExcerptLines, 12} {
		ex := r.Excerpt(maxLines, hint)
		lines := strings.Split(ex, "\n")
		if len(lines) > maxLines {
			t.Errorf("excerpt of %d lines; want at most %d:\n%s", len(lines), maxLines, ex)
		}
		shown, left := map[string]int{}, 0
		for _, line := range lines {
			if len(line) > excerptLine || !utf8.ValidString(line) {
				t.Errorf("a line of %d bytes (valid UTF-8: %t); want at most %d", len(line), utf8.ValidString(line), excerptLine)
			}
			if m := moreProblems.FindStringSubmatch(line); m != nil {
				n, _ := strconv.Atoi(m[1])
				left += n
			} else if strings.HasPrefix(line, "- round ") {
				shown[strings.Fields(line)[3]]++
			}
		}
		for _, want := range []string{"[concurrent-delivery / plain] MUST", "[concurrent-delivery / with a hold after the claim] MUST", "- round 1 (plain,", "- round 1 (overlap,"} {
			if !strings.Contains(ex, want) {
				t.Errorf("%d lines: the excerpt lacks %q:\n%s", maxLines, want, ex)
			}
		}
		if got := strings.Count(ex, "This usually means"); got != 1 {
			t.Errorf("%d lines: %d lines say what the failure usually means; want one, for the rule:\n%s", maxLines, got, ex)
		}
		if total := shown["(plain,"] + shown["(overlap,"] + left; total != 30 || left == 0 {
			t.Errorf("%d lines: %d problems shown and %d said to be left out; want 30 in all, some left out:\n%s", maxLines, total-left, left, ex)
		}
	}
	if ex := r.Excerpt(certificate.ExcerptLines, hint); !strings.Contains(ex, "- round 2 (plain,") {
		t.Errorf("with %d lines the excerpt shows only the first problem of each variant:\n%s", certificate.ExcerptLines, ex)
	}

	// A problem of many lines is cut to a few.
	long := failedRule(t, catalogid.ConcurrentDeliveryOneEffect, map[string][]string{
		"plain": {"round 1: 60 deliveries:" + strings.Repeat("\n  error: something else", 60)},
	})
	ex := long.Excerpt(certificate.ExcerptLines, hint)
	if n := strings.Count(ex, "error: something else"); n != excerptProblemLines-2 || !strings.Contains(ex, "… and 56 more lines of this problem; "+hint) {
		t.Errorf("a problem of 61 lines shows %d of its further lines; want %d and how many more:\n%s", n, excerptProblemLines-2, ex)
	}

	// A message of another shape (a Ginkgo failure, say) is cut too.
	free := certificate.RuleResult{Message: strings.Repeat("a line of a progress report\n", 100) + "the end"}
	ex = free.Excerpt(certificate.ExcerptLines, hint)
	if lines := strings.Split(ex, "\n"); len(lines) != certificate.ExcerptLines || lines[len(lines)-1] != "… and 62 more lines; "+hint {
		t.Errorf("a message of 101 plain lines gives an excerpt of %d lines ending %q", len(lines), lines[len(lines)-1])
	}
	if short := (certificate.RuleResult{Message: "one line\n- one problem\n  on two lines"}); short.Excerpt(certificate.ExcerptLines, hint) != short.Message {
		t.Errorf("a short message was changed: %q", short.Excerpt(certificate.ExcerptLines, hint))
	}
}
