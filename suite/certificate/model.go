package certificate

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
)

// Verdict is a rule's result in a certificate.
type Verdict string

const (
	// VerdictPass means every spec of the rule ran and passed.
	VerdictPass Verdict = "pass"
	// VerdictFail means a spec of the rule failed; the message says what was observed.
	VerdictFail Verdict = "fail"
	// VerdictNotSupported means the rule does not apply to what the implementation
	// declares, or the environment cannot run it; the message says which.
	VerdictNotSupported Verdict = "not-supported"
	// VerdictSkipped means the rule did not run (filtered out, or the run stopped early).
	VerdictSkipped Verdict = "skipped"
	// VerdictNotApplicable means the implementation has nothing the rule
	// tests: it declares no external effects, so the external-effect rules
	// have no boundary to judge; the message says "external effects: none
	// declared". Unlike not-supported it is no gap in the run but a true
	// statement about the implementation, and does not lower the status.
	VerdictNotApplicable Verdict = "not-applicable"
)

// Status is a certificate's overall verdict.
type Status string

const (
	// StatusCertified: every MUST rule ran and passed (or is
	// not-applicable), and no rule failed.
	StatusCertified Status = "certified"
	// StatusPartial: no rule failed, but some MUST rules did not run:
	// they could not run here (not-supported: the environment, or what the
	// implementation declares, rules them out) or were left out (skipped).
	// What ran passed; what did not run is not certified.
	StatusPartial Status = "partial"
	// StatusNotCertified: a rule failed, or the run could not start.
	StatusNotCertified Status = "not-certified"
	// StatusInterrupted: the run was stopped before it ended (a signal).
	// It certifies nothing; the rules it had judged keep their verdicts,
	// and none failed because of the interruption.
	StatusInterrupted Status = "interrupted"
)

// RuleResult is one rule's verdict.
type RuleResult struct {
	ID      string         `json:"id"`
	Fixture string         `json:"fixture"`
	Level   fixtures.Level `json:"level"`
	Doc     string         `json:"doc"`
	Verdict Verdict        `json:"verdict"`
	// Message is what failed, with every problem found (see
	// [RuleResult.Excerpt] for its shape), why the rule is not supported,
	// or a note on a pass. No line of it is longer than 4096 bytes.
	Message string `json:"message,omitempty"`
}

// Certificate is the suite's verdict on one implementation.
type Certificate struct {
	// Adapter is the adapter's name.
	Adapter string `json:"adapter"`
	// Status is the overall verdict: certified, partial, not-certified or
	// interrupted (see [Status]).
	Status Status `json:"status"`
	// Certified is true exactly when Status is [StatusCertified]: every
	// MUST rule ran and passed, and no rule failed.
	Certified bool `json:"certified"`
	// SuiteVersion is the version of the suite that judged.
	SuiteVersion string `json:"suite_version"`
	// Harness identifies the build of the harness that judged.
	Harness HarnessInfo `json:"harness"`
	// Protocol describes how the harness drove an implementation that runs
	// in another process; nil, and absent from the JSON, for an in-process
	// adapter.
	Protocol *Protocol `json:"protocol,omitempty"`
	// Database is the PostgreSQL server's version.
	Database string `json:"database"`
	// DatabaseKind says how the database was provided: dsn, container or
	// cluster.
	DatabaseKind string `json:"database_kind"`
	// Declared is what the adapter declares it can do.
	Declared adapters.Declaration `json:"declared"`
	// Verified is the part of Declared that the run proved: a capability
	// holds the declared value only when every rule of a fixture that
	// verifies it passed, and the zero value otherwise. Each fixture of the
	// catalogue names what it verifies (fixtures.Fixture.Verifies;
	// `harmless list --json` shows it): conflicting-payload the conflict
	// policy, retention-expiry the redelivery window and whether the
	// implementation follows the harness's clock, external-effect the
	// external effects. A rule that was skipped, not-supported,
	// not-applicable or failed verifies nothing. [Verify] decides it.
	Verified adapters.Declaration `json:"verified"`
	// Seed is the seed of the run's random choices: the same seed repeats
	// them (suite.WithSeed, harmless certify --seed).
	Seed uint64 `json:"seed"`
	// Error is set when the run could not start (no database, a bad
	// adapter); no rule ran then.
	Error string `json:"error,omitempty"`
	// Interrupted says why the run stopped before it ended, when it did
	// (Status is then [StatusInterrupted]): e.g. "Interrupted by User".
	Interrupted string `json:"interrupted,omitempty"`
	// Rules holds one verdict per rule, in catalogue order.
	Rules []RuleResult `json:"rules"`
	// Faults counts, by kind, how many times the harness's faults fired
	// during the run; a kind that never fired is absent. The kinds are
	// "db:<action>@<point>" (a database-side fault, e.g. "db:raise@effect",
	// "db:sleep@effect", "db:terminate@commit"), "hook:<action>" (a Go hook
	// in the effect: "hook:error", "hook:panic", "hook:cancel"),
	// "proxy:<action>@<point>" (a rule of the wire proxy, e.g.
	// "proxy:cut@before-commit", "proxy:cut@after-commit-complete",
	// "proxy:cut@after-statement"), "server:crash" and "dest:<action>" (a
	// fault of the external destination: "dest:status-500",
	// "dest:status-503", "dest:drop-after-process", "dest:slow",
	// "dest:hold", "dest:down"). It is never nil in
	// a certificate the suite made.
	Faults map[string]int64 `json:"faults"`
	// Crashes lists, per play and instance, the crashes of the
	// implementation's processes, which the harness restarted as a
	// supervisor would (an exec child that exited, crashed or broke the
	// protocol), and the deliveries of an in-process implementation that
	// panicked; absent when there were none.
	Crashes []Crash `json:"crashes,omitempty"`
	// Redelivery says how patient the broker the harness played was, and
	// had to be.
	Redelivery Redelivery `json:"redelivery"`
	// Reports are what fixtures saw beside their rules' verdicts:
	// information about the deployment, never a verdict (see [Report]).
	Reports []Report `json:"reports,omitempty"`
	// Started and Duration time the run.
	Started  time.Time `json:"started_at"`
	Duration float64   `json:"duration_s"`
}

// Redelivery is the broker's patience and what the run needed of it.
type Redelivery struct {
	// Patience is how long the broker went on redelivering while none of
	// a play's deliveries was acknowledged or refused, in seconds.
	Patience float64 `json:"patience_s"`
	// LongestWait is the longest the implementation made the broker
	// redeliver before one of its deliveries was acknowledged or refused
	// again, in seconds: how much of the patience it needed.
	LongestWait float64 `json:"longest_wait_s"`
	// GaveUp counts the times the broker ran out of patience.
	GaveUp int `json:"gave_up"`
}

// Report is what a fixture saw beside its rules' verdicts: information
// about the deployment the implementation runs on, which decides no
// verdict and never changes the status. The failover fixture's
// asynchronous variant, for one, reports what a failover lost with
// asynchronous replication (Title "async-replication"; docs/reports.md
// lists its facts).
type Report struct {
	// Fixture is the id of the fixture that reports.
	Fixture string `json:"fixture"`
	// Title names the report in a word or two, e.g. "async-replication".
	Title string `json:"title"`
	// Note says what was seen, in words, as the terminal prints it.
	Note string `json:"note"`
	// Facts are the figures behind the note, by name: numbers, strings
	// and lists of strings, as the fixture's page in docs/ describes them.
	Facts map[string]any `json:"facts,omitempty"`
}

// Crash is the crashes of one instance of the implementation in one play.
type Crash struct {
	// Play names the play, e.g. "failure-after-marker / the connection
	// killed at the effect".
	Play string `json:"play"`
	// Instance is the instance's number, from 1.
	Instance int `json:"instance"`
	// Count is how many times its processes crashed.
	Count int `json:"count"`
	// First describes the first crash: how the process failed and the
	// first lines of its crash report.
	First string `json:"first"`
}

// CrashCount is how many crashes the run saw in all.
func (c Certificate) CrashCount() int {
	n := 0
	for _, cr := range c.Crashes {
		n += cr.Count
	}
	return n
}

// Protocol describes how the harness drove an implementation that runs in
// another process.
type Protocol struct {
	// Name is the protocol's name, e.g. "harmless-exec".
	Name string `json:"name"`
	// Version is the protocol version both sides spoke.
	Version int `json:"version"`
	// Command is the command that runs the implementation.
	Command string `json:"command"`
	// Implementation is the name and version the implementation reported.
	Implementation string `json:"implementation"`
	// MaxInFlight is how many requests one process of the implementation
	// handles at once, as it declared.
	MaxInFlight int `json:"max_in_flight"`
}

// String describes the protocol on one line, e.g. `harmless-exec v1:
// "./consumer --harmless", implementation "consumer 1.4.2", up to 8
// requests in flight per process`.
func (p Protocol) String() string {
	return fmt.Sprintf("%s v%d: %q, implementation %q, up to %d requests in flight per process", p.Name, p.Version, p.Command, p.Implementation, p.MaxInFlight)
}

// Count returns how many rules have verdict v.
func (c Certificate) Count(v Verdict) int {
	n := 0
	for _, r := range c.Rules {
		if r.Verdict == v {
			n++
		}
	}
	return n
}

// Summary is the closing line: "N passed, N failed" and, when there are any,
// the skipped and not-supported counts.
func (c Certificate) Summary() string {
	s := fmt.Sprintf("%d passed, %d failed", c.Count(VerdictPass), c.Count(VerdictFail))
	if n := c.Count(VerdictSkipped); n > 0 {
		s += fmt.Sprintf(", %d skipped", n)
	}
	if n := c.Count(VerdictNotSupported); n > 0 {
		s += fmt.Sprintf(", %d not-supported", n)
	}
	if n := c.Count(VerdictNotApplicable); n > 0 {
		s += fmt.Sprintf(", %d not-applicable", n)
	}
	return s
}

// Table renders the verdicts, one row per rule.
func (c Certificate) Table() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "RULE\tFIXTURE\tLEVEL\tVERDICT")
	for _, r := range c.Rules {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.ID, r.Fixture, r.Level, strings.ToUpper(string(r.Verdict)))
	}
	w.Flush()
	return b.String()
}

// StatusOf decides the overall verdict of a run's rules: not-certified
// when there are none or any MUST rule failed, else partial when a MUST
// rule did not pass (it was not-supported or skipped), else certified. A
// SHOULD rule is reported but decides nothing, and a not-applicable rule
// lowers nothing: the implementation has nothing it tests. Certificates
// use it; so can a tool that merges the rules of several filtered runs.
func StatusOf(rules []RuleResult) Status {
	if len(rules) == 0 {
		return StatusNotCertified
	}
	st := StatusCertified
	for _, r := range rules {
		switch {
		case r.Verdict == VerdictFail && r.Level == fixtures.Must:
			return StatusNotCertified
		case r.Level == fixtures.Must && r.Verdict != VerdictPass && r.Verdict != VerdictNotApplicable:
			st = StatusPartial
		}
	}
	return st
}

// Verify returns the part of declared that rules prove, as
// Certificate.Verified states it: each part that a fixture of the
// catalogue verifies (fixtures.Fixture.Verifies) when every rule of that
// fixture passed. The max send delay is never verified: it is how long
// the harness waited for sends, which no rule tests. A fixture none of
// whose rules is in rules proves nothing. The suite uses it to build a
// certificate; so can a tool that merges the rules of several filtered
// runs.
func Verify(declared adapters.Declaration, rules []RuleResult) adapters.Declaration {
	passed := func(fixture string) bool {
		n := 0
		for _, r := range rules {
			if r.Fixture != fixture {
				continue
			}
			if r.Verdict != VerdictPass {
				return false
			}
			n++
		}
		return n > 0
	}
	var v adapters.Declaration
	for _, f := range fixtures.Catalog() {
		if !passed(f.ID) {
			continue
		}
		for _, part := range f.Verifies {
			switch part {
			case "conflict_policy":
				v.ConflictPolicy = declared.ConflictPolicy
			case "redelivery_window_s":
				v.RedeliveryWindow = declared.RedeliveryWindow
			case "accepts_clock":
				v.AcceptsClock = declared.AcceptsClock
			case "external_effects":
				v.ExternalEffects = declared.ExternalEffects
			}
		}
	}
	return v
}

// NotRun returns the MUST rules that did not run: not-supported or
// skipped. Their messages say why. A partial certificate lists them.
func (c Certificate) NotRun() []RuleResult {
	var out []RuleResult
	for _, r := range c.Rules {
		if r.Level == fixtures.Must && (r.Verdict == VerdictNotSupported || r.Verdict == VerdictSkipped) {
			out = append(out, r)
		}
	}
	return out
}

// Headline is the certificate's verdict in capitals: "CERTIFIED",
// "PARTIAL", "INTERRUPTED" or "NOT CERTIFIED".
func (c Certificate) Headline() string {
	switch c.Status {
	case StatusCertified:
		return "CERTIFIED"
	case StatusPartial:
		return "PARTIAL"
	case StatusInterrupted:
		return "INTERRUPTED"
	}
	return "NOT CERTIFIED"
}
