package suite

import (
	"testing"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// TestStatusOfASetupError: a run that could not start is not certified,
// whatever its rules say (package certificate tests StatusOf itself).
func TestStatusOfASetupError(t *testing.T) {
	var rules []certificate.RuleResult
	for _, r := range fixtures.Rules() {
		rules = append(rules, certificate.RuleResult{ID: r.ID, Fixture: r.Fixture, Level: r.Level, Doc: r.Doc, Verdict: certificate.VerdictPass})
	}
	if got := status("no database", rules); got != certificate.StatusNotCertified {
		t.Errorf("a run that could not start: %s; want %s", got, certificate.StatusNotCertified)
	}
	if got := status("", rules); got != certificate.StatusCertified {
		t.Errorf("a run whose rules all passed: %s; want %s", got, certificate.StatusCertified)
	}
}

// TestWithProtocol: the option puts the protocol into the certificate a
// run makes.
func TestWithProtocol(t *testing.T) {
	p := certificate.Protocol{Name: "harmless-exec", Version: 1, Command: "./consumer --harmless", Implementation: "consumer 1.4.2", MaxInFlight: 8}
	s := &state{cfg: newConfig([]Option{WithProtocol(p)})}
	if s.cfg.protocol == nil || *s.cfg.protocol != p {
		t.Fatalf("WithProtocol: config holds %+v; want %+v", s.cfg.protocol, p)
	}
}
