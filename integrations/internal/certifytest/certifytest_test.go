package certifytest

import (
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/suite/certificate"
)

func cert(kind string, verdicts ...string) certificate.Certificate {
	c := certificate.Certificate{DatabaseKind: kind}
	for i := 0; i < len(verdicts); i += 2 {
		c.Rules = append(c.Rules, certificate.RuleResult{ID: verdicts[i], Verdict: certificate.Verdict(verdicts[i+1])})
	}
	return c
}

// TestDrift checks which differences between a committed certificate and a
// run make the verdict table wrong.
func TestDrift(t *testing.T) {
	cases := []struct {
		name           string
		committed, run certificate.Certificate
		want           []string // a fragment of each drift, in order
	}{
		{"same", cert("cluster", "a", "pass", "b", "fail"), cert("cluster", "a", "pass", "b", "fail"), nil},
		{"a pass turned fail", cert("cluster", "a", "pass", "b", "fail"), cert("cluster", "a", "fail", "b", "fail"),
			[]string{"rule a: pass in the committed certificate (on a cluster server), fail in this run"}},
		{"a fail turned pass", cert("dsn", "a", "fail"), cert("dsn", "a", "pass"), []string{"rule a: fail"}},
		{"crash rules on a DSN", cert("cluster", "crash", "pass", "a", "pass"), cert("dsn", "crash", "not-supported", "a", "pass"), nil},
		{"not-supported on the same kind", cert("cluster", "crash", "pass"), cert("cluster", "crash", "not-supported"),
			[]string{"rule crash: pass"}},
		{"a new rule", cert("cluster", "a", "pass"), cert("cluster", "a", "pass", "b", "pass"), []string{"rule b (pass in this run) is not in"}},
		{"a rule gone", cert("cluster", "a", "pass", "b", "fail"), cert("cluster", "a", "pass"), []string{"rule b (fail in the committed certificate) did not run"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Drift(c.committed, c.run)
			if len(got) != len(c.want) {
				t.Fatalf("drift %q; want %d entries like %q", got, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("drift %d = %q; want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}
