package suite

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/provenance"
	"github.com/harmless-dev/harmless/internal/redact"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// This file folds what a registration recorded into its certificate: the
// rules' verdicts (folded from the specs' typed records, see verdicts.go),
// the status, an interruption, and the masking of secrets. The
// certificate's model and its reports are package certificate's.

// certificate builds the registration's certificate from its records.
func (s *state) certificate() certificate.Certificate {
	cert := certificate.Certificate{
		Adapter:      s.adapter.Name,
		SuiteVersion: Version,
		Harness:      provenance.Harness(),
		Protocol:     s.cfg.protocol,
		Database:     s.database,
		DatabaseKind: s.kind,
		Declared:     s.adapter.Declares,
		Seed:         s.seed,
		Faults:       map[string]int64{},
		Crashes:      s.inPlayOrder(s.crashes),
		Redelivery:   s.redelivery,
		Started:      s.started,
	}
	s.mu.Lock()
	cert.Reports = slices.Clone(s.reports)
	s.mu.Unlock()
	s.sortReports(cert.Reports)
	if !s.started.IsZero() {
		cert.Duration = time.Since(s.started).Seconds()
	}
	cert.Redelivery.Patience = s.cfg.redeliveryPatience.Seconds()
	if s.run != nil {
		maps.Copy(cert.Faults, s.run.FaultsFired())
	}
	switch {
	case s.setupErr != nil:
		cert.Error = s.setupErr.Error()
	case s.reachErr != nil:
		cert.Error = s.reachErr.Error()
	}
	cert.Rules = ruleResults(fixtures.Rules(), s.order)
	cert.Status = status(cert.Error, cert.Rules)
	cert.Certified = cert.Status == certificate.StatusCertified
	cert.Verified = certificate.Verify(cert.Declared, cert.Rules)
	if s.interrupted != "" {
		interrupt(&cert, s.interrupted)
	}
	if s.cancelled {
		interrupt(&cert, fmt.Sprintf("cancelled: %v", context.Cause(s.ctx)))
	}
	return masked(cert, s.secrets)
}

// interrupt marks c as the certificate of a run stopped before it ended,
// for reason (a more precise reason may replace one given before): it
// certifies nothing, and the rules that did not run say why.
func interrupt(c *certificate.Certificate, reason string) {
	c.Interrupted, c.Status, c.Certified = reason, certificate.StatusInterrupted, false
	for i, r := range c.Rules {
		if r.Verdict == certificate.VerdictSkipped {
			c.Rules[i].Message = fmt.Sprintf("did not run to its end: the run was interrupted (%s)", reason)
		}
	}
}

// masked returns c with secrets masked in every text that can quote one:
// the setup error (a driver's error may quote the DSN), the rules'
// messages and the crashes (a child's stderr, a failure's evidence) and
// the protocol's command. Every report (JSON, JUnit, Markdown, the terminal) is written
// from the certificate, so this is where they are all masked.
func masked(c certificate.Certificate, secrets *redact.Redactor) certificate.Certificate {
	c.Error = secrets.String(c.Error)
	c.Interrupted = secrets.String(c.Interrupted)
	if c.Protocol != nil {
		p := *c.Protocol
		p.Command, p.Implementation = secrets.String(p.Command), secrets.String(p.Implementation)
		c.Protocol = &p
	}
	c.Rules = slices.Clone(c.Rules)
	for i, r := range c.Rules {
		c.Rules[i].Message = secrets.String(r.Message)
	}
	c.Crashes = slices.Clone(c.Crashes)
	for i, cr := range c.Crashes {
		c.Crashes[i].First = secrets.String(cr.First)
	}
	return c
}

// status decides a certificate's overall verdict: not-certified when the
// run could not start, or no fault could reach the implementation, else
// [certificate.StatusOf] its rules.
func status(setupErr string, rules []certificate.RuleResult) certificate.Status {
	if setupErr != "" {
		return certificate.StatusNotCertified
	}
	return certificate.StatusOf(rules)
}

// inPlayOrder returns the crashes sorted by their plays' order in the
// tree: plays run side by side close in any order, and the certificate
// lists them as if they had run one after another.
func (s *state) inPlayOrder(crashes []certificate.Crash) []certificate.Crash {
	order := make(map[string]int)
	for i, pn := range s.root.plays() {
		order[pn.name] = i
	}
	out := slices.Clone(crashes)
	slices.SortStableFunc(out, func(a, b certificate.Crash) int { return cmp.Compare(order[a.Play], order[b.Play]) })
	return out
}

// sortReports sorts the fixtures' reports in catalogue order, keeping the
// order of each fixture's own.
func (s *state) sortReports(reports []certificate.Report) {
	order := make(map[string]int)
	for i, fx := range s.root.children {
		order[fx.fixture] = i
	}
	slices.SortStableFunc(reports, func(a, b certificate.Report) int { return cmp.Compare(order[a.Fixture], order[b.Fixture]) })
}
