package suite

import (
	"bytes"
	"encoding/json"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/fixtures"
)

func TestBuildCommit(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		s := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}}
		if modified != "" {
			s = append(s, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return s
	}
	harness := func(version string, settings ...debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: version}, Settings: settings}
	}
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "unknown"},
		{"clean checkout", harness("(devel)", vcs("0123abcd", "false")...), "0123abcd"},
		{"modified checkout", harness("(devel)", vcs("0123abcd", "true")...), "0123abcd-dirty"},
		{"revision without modified flag", harness("(devel)", vcs("0123abcd", "")...), "0123abcd"},
		{"go install of a release", harness("v0.1.0"), "v0.1.0"},
		{"go install of a pseudo-version", harness("v0.0.0-20261129234000-0123abcd4567"), "v0.0.0-20261129234000-0123abcd4567"},
		{"-buildvcs=false", harness("(devel)"), "unknown"},
		{"empty version", harness(""), "unknown"},
		{"a dependency of another module", &debug.BuildInfo{
			Main:     debug.Module{Path: "example.com/consumer", Version: "(devel)"},
			Settings: vcs("ffffffff", "true"),
			Deps:     []*debug.Module{{Path: "example.com/other", Version: "v9.9.9"}, {Path: modulePath, Version: "v0.1.0"}},
		}, "v0.1.0"},
		{"a dependency replaced by a local directory", &debug.BuildInfo{
			Main: debug.Module{Path: "example.com/consumer"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v0.1.0", Replace: &debug.Module{Path: "../harmless"}}},
		}, "unknown"},
		{"not in the build at all", &debug.BuildInfo{Main: debug.Module{Path: "example.com/consumer"}, Settings: vcs("ffffffff", "")}, "unknown"},
	} {
		if got := buildCommit(tc.info); got != tc.want {
			t.Errorf("%s: buildCommit = %q; want %q", tc.name, got, tc.want)
		}
	}
	if h := Harness(); h.Version != Version || h.Commit == "" {
		t.Errorf("Harness() = %+v; want version %s and a commit", h, Version)
	}
}

// ruleVerdicts returns a result for every rule of the catalogue, each with
// verdict v except those named in except.
func ruleVerdicts(v Verdict, except map[string]Verdict) []RuleResult {
	var rules []RuleResult
	for _, r := range fixtures.Rules() {
		res := RuleResult{ID: r.ID, Fixture: r.Fixture, Level: r.Level, Doc: r.Doc, Verdict: v}
		if e, ok := except[r.ID]; ok {
			res.Verdict = e
		}
		rules = append(rules, res)
	}
	return rules
}

func TestVerify(t *testing.T) {
	all := Capabilities{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: 86400, AcceptsClock: true}
	for _, tc := range []struct {
		name     string
		declared Capabilities
		except   map[string]Verdict
		want     Capabilities
	}{
		{"every rule passed", all, nil, all},
		{"a conflict rule failed", all, map[string]Verdict{fixtures.ConflictingPayloadDetected: VerdictFail},
			Capabilities{RedeliveryWindow: 86400, AcceptsClock: true}},
		{"a retention rule failed", all, map[string]Verdict{fixtures.RetentionExpiryStateBounded: VerdictFail},
			Capabilities{ConflictPolicy: adapters.RejectConflicts}},
		{"a retention rule skipped", all, map[string]Verdict{fixtures.RetentionExpiryKeptInsideWindow: VerdictSkipped},
			Capabilities{ConflictPolicy: adapters.RejectConflicts}},
		{"the real clock", Capabilities{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: 2}, nil,
			Capabilities{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: 2}},
		{"nothing declared", Capabilities{}, nil, Capabilities{}},
	} {
		if got := verify(tc.declared, ruleVerdicts(VerdictPass, tc.except)); got != tc.want {
			t.Errorf("%s: verified %+v; want %+v", tc.name, got, tc.want)
		}
	}
	// Without a window the retention rules are not-supported: no window,
	// and no clock, is verified.
	notSupported := map[string]Verdict{}
	for _, r := range fixtures.Rules() {
		if r.Fixture == fixtures.RetentionExpiry {
			notSupported[r.ID] = VerdictNotSupported
		}
	}
	if got := verify(Capabilities{ConflictPolicy: adapters.RejectConflicts, AcceptsClock: true}, ruleVerdicts(VerdictPass, notSupported)); got != (Capabilities{ConflictPolicy: adapters.RejectConflicts}) {
		t.Errorf("retention not-supported: verified %+v; want the conflict policy only", got)
	}
}

// TestStatus: a run is certified only when every MUST rule ran and passed;
// partial when nothing failed but a MUST rule did not run; not certified
// when anything failed or the run could not start.
func TestStatus(t *testing.T) {
	should := func(rules []RuleResult, id string) []RuleResult {
		for i := range rules {
			if rules[i].ID == id {
				rules[i].Level = fixtures.Should
			}
		}
		return rules
	}
	for _, tc := range []struct {
		name     string
		setupErr string
		rules    []RuleResult
		want     Status
		notRun   int
	}{
		{"every rule passed", "", ruleVerdicts(VerdictPass, nil), StatusCertified, 0},
		{"a rule failed", "", ruleVerdicts(VerdictPass, map[string]Verdict{fixtures.DoubleDeliveryOneEffect: VerdictFail}), StatusNotCertified, 0},
		{"a failure beside rules that did not run", "", ruleVerdicts(VerdictNotSupported, map[string]Verdict{fixtures.DoubleDeliveryOneEffect: VerdictFail}), StatusNotCertified, len(fixtures.Rules()) - 1},
		{"a MUST rule not-supported", "", ruleVerdicts(VerdictPass, map[string]Verdict{fixtures.CrashRecoveryAppliedSurvives: VerdictNotSupported}), StatusPartial, 1},
		{"a MUST rule filtered out", "", ruleVerdicts(VerdictPass, map[string]Verdict{fixtures.BadInputRunContinues: VerdictSkipped}), StatusPartial, 1},
		{"a SHOULD rule not-supported", "", should(ruleVerdicts(VerdictPass, map[string]Verdict{fixtures.BadInputRunContinues: VerdictNotSupported}), fixtures.BadInputRunContinues), StatusCertified, 0},
		{"a SHOULD rule failed", "", should(ruleVerdicts(VerdictPass, map[string]Verdict{fixtures.BadInputRunContinues: VerdictFail}), fixtures.BadInputRunContinues), StatusNotCertified, 0},
		{"nothing ran", "", ruleVerdicts(VerdictSkipped, nil), StatusPartial, len(fixtures.Rules())},
		{"no rules at all", "", nil, StatusNotCertified, 0},
		{"the run could not start", "no database", ruleVerdicts(VerdictSkipped, nil), StatusNotCertified, len(fixtures.Rules())},
	} {
		c := Certificate{Error: tc.setupErr, Rules: tc.rules}
		c.Status = status(tc.setupErr, tc.rules)
		if c.Status != tc.want || len(c.NotRun()) != tc.notRun {
			t.Errorf("%s: status %s with %d MUST rules not run; want %s and %d", tc.name, c.Status, len(c.NotRun()), tc.want, tc.notRun)
		}
	}
	for st, want := range map[Status]string{StatusCertified: "CERTIFIED", StatusPartial: "PARTIAL", StatusNotCertified: "NOT CERTIFIED", "": "NOT CERTIFIED"} {
		if got := (Certificate{Status: st}).Headline(); got != want {
			t.Errorf("Headline of %q = %q; want %q", st, got, want)
		}
	}
}

// TestPartialMarkdownSaysWhatDidNotRun: the summary of a partial run lists
// each MUST rule that did not run, with the first line of why.
func TestPartialMarkdownSaysWhatDidNotRun(t *testing.T) {
	c := Certificate{Adapter: "sample", Faults: map[string]int64{}, Rules: ruleVerdicts(VerdictPass, map[string]Verdict{
		fixtures.CrashRecoveryAppliedSurvives: VerdictNotSupported, fixtures.CrashRecoveryInFlightExactlyOnce: VerdictNotSupported,
	})}
	for i := range c.Rules {
		if c.Rules[i].Verdict == VerdictNotSupported {
			c.Rules[i].Message = "[crash-recovery] needs a server the harness owns\nmore"
		}
	}
	c.Status = status("", c.Rules)
	var b bytes.Buffer
	if err := c.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## harmless: PARTIAL: `sample`\n",
		"No rule failed, but 2 MUST rules did not run",
		"- `" + fixtures.CrashRecoveryAppliedSurvives + "` (not-supported): [crash-recovery] needs a server the harness owns\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}

// sampleCertificate is a certificate with every verdict: a failure whose
// message holds a code fence and a pipe, a not-supported rule, a skipped
// one, and passes.
func sampleCertificate() Certificate {
	except := map[string]Verdict{
		fixtures.ConflictingPayloadDetected:   VerdictFail,
		fixtures.CrashRecoveryAppliedSurvives: VerdictNotSupported,
		fixtures.BadInputRunContinues:         VerdictSkipped,
	}
	rules := ruleVerdicts(VerdictPass, except)
	for i, r := range rules {
		switch r.Verdict {
		case VerdictFail:
			rules[i].Message = "MUST violated: answered Duplicate\n```\nnot the end | of anything\n```"
		case VerdictNotSupported:
			rules[i].Message = "[crash-recovery] needs a server the harness owns"
		case VerdictSkipped:
			rules[i].Message = noSpecRan
		}
	}
	declares := Capabilities{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: 3600, AcceptsClock: true}
	return Certificate{
		Adapter:      "sample",
		SuiteVersion: Version,
		Harness:      HarnessInfo{Version: Version, Commit: "0123abcd-dirty"},
		Database:     "15.20 (Debian 15.20-0+deb12u1)",
		DatabaseKind: "dsn",
		Declared:     declares,
		Verified:     verify(declares, rules),
		Seed:         42,
		Rules:        rules,
		Faults:       map[string]int64{"db:raise@effect": 3, "hook:panic": 1, "proxy:cut@before-commit": 2},
		Started:      time.Date(2026, 11, 29, 23, 40, 0, 0, time.UTC),
		Duration:     6.1,
	}
}

func TestWriteMarkdown(t *testing.T) {
	c := sampleCertificate()
	var b bytes.Buffer
	if err := c.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	t.Logf("the Markdown:\n%s", md)
	lines := strings.Split(md, "\n")
	if want := "## harmless: NOT CERTIFIED: `sample`"; lines[0] != want {
		t.Errorf("heading %q; want %q", lines[0], want)
	}
	for _, want := range []string{
		"**" + c.Summary() + "**",
		"| database | PostgreSQL 15.20 (Debian 15.20-0+deb12u1) (dsn) |",
		"| harness | " + Version + ", commit `0123abcd-dirty` |",
		"| seed | 42 (repeat with `--seed 42`) |",
		"| declared | conflict policy reject, redelivery window 1h0m0s, accepts the harness's clock |",
		"| verified | redelivery window 1h0m0s, accepts the harness's clock |",
		"| faults fired | `db:raise@effect` 3, `hook:panic` 1, `proxy:cut@before-commit` 2 |",
		"| rule | fixture | level | verdict |",
		"| `double-delivery.one-effect` | double-delivery | MUST | PASS |",
		"| `conflicting-payload.conflict-detected` | conflicting-payload | MUST | **FAIL** |",
		"| `crash-recovery.applied-survives` | crash-recovery | MUST | _NOT-SUPPORTED_ |",
		"| `bad-input.run-continues` | bad-input | MUST | _SKIPPED_ |",
		"<details><summary><code>conflicting-payload.conflict-detected</code> (MUST, fail)</summary>",
		"<details><summary><code>crash-recovery.applied-survives</code> (MUST, not-supported)</summary>",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("no line %q", want)
		}
	}
	rows := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "| `") {
			rows++
		}
	}
	if rows != len(c.Rules) {
		t.Errorf("%d rule rows; want %d", rows, len(c.Rules))
	}
	// The message holds a fence of three backticks: the block around it
	// needs a longer one, so the message shows whole.
	if !strings.Contains(md, "````text\nMUST violated: answered Duplicate\n```\nnot the end | of anything\n```\n````\n") {
		t.Error("the failure message is not fenced whole")
	}
	if strings.Contains(md, "\x1b[") {
		t.Error("the Markdown holds ANSI escapes")
	}
	if strings.Contains(md, "| protocol |") {
		t.Error("a protocol row without a protocol")
	}

	c.Protocol = &Protocol{Name: "harmless-exec", Version: 1, Command: "./consumer --harmless", Implementation: "consumer 1.4.2", MaxInFlight: 8}
	c.Status, c.Certified = StatusCertified, true
	b.Reset()
	if err := c.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## harmless: CERTIFIED: `sample`\n",
		"\n| protocol | harmless-exec v1: \"./consumer --harmless\", implementation \"consumer 1.4.2\", up to 8 requests in flight per process |\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}

func TestProtocolInJSON(t *testing.T) {
	c := sampleCertificate()
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatal(err)
	}
	if _, ok := fields["protocol"]; ok {
		t.Errorf("an in-process adapter's certificate has a protocol: %s", fields["protocol"])
	}
	for _, key := range []string{"adapter", "status", "certified", "suite_version", "harness", "database", "database_kind", "declared", "verified", "seed", "rules", "faults", "started_at", "duration_s"} {
		if _, ok := fields[key]; !ok {
			t.Errorf("the certificate has no %q", key)
		}
	}
	if got, want := string(fields["declared"]), `{"conflict_policy":"reject","redelivery_window_s":3600,"accepts_clock":true}`; got != want {
		t.Errorf("declared %s; want %s", got, want)
	}
	if got, want := string(fields["harness"]), `{"version":"`+Version+`","commit":"0123abcd-dirty"}`; got != want {
		t.Errorf("harness %s; want %s", got, want)
	}

	// The option puts the protocol into the certificate a run makes.
	p := Protocol{Name: "harmless-exec", Version: 1, Command: "./consumer --harmless", Implementation: "consumer 1.4.2", MaxInFlight: 8}
	s := &state{cfg: newConfig([]Option{WithProtocol(p)})}
	if s.cfg.protocol == nil || *s.cfg.protocol != p {
		t.Fatalf("WithProtocol: config holds %+v; want %+v", s.cfg.protocol, p)
	}
	c.Protocol = s.cfg.protocol
	if data, err = json.Marshal(c); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatal(err)
	}
	if got, want := string(fields["protocol"]), `{"name":"harmless-exec","version":1,"command":"./consumer --harmless","implementation":"consumer 1.4.2","max_in_flight":8}`; got != want {
		t.Errorf("protocol %s; want %s", got, want)
	}
	var back Certificate
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Protocol == nil || *back.Protocol != p {
		t.Errorf("the protocol read back is %+v; want %+v", back.Protocol, p)
	}
}

func TestLineUp(t *testing.T) {
	ev := newEvent(fixtures.ConcurrentDelivery, "overlap-1-1")
	a, b := &state{seed: 1}, &state{seed: 2}
	order1, workers1 := a.lineUp(ev, 16)
	order1b, workers1b := a.lineUp(ev, 16)
	if !slices.Equal(order1, order1b) || !slices.Equal(workers1, workers1b) {
		t.Error("the same seed lines the same round up differently")
	}
	order2, workers2 := b.lineUp(ev, 16)
	if slices.Equal(order1, order2) && slices.Equal(workers1, workers2) {
		t.Error("two seeds line a round up the same way")
	}
	if order3, _ := a.lineUp(newEvent(fixtures.ConcurrentDelivery, "overlap-2-1"), 16); slices.Equal(order1, order3) {
		t.Error("two rounds of one run are lined up the same way")
	}
	for _, n := range []int{2, 3, 16, 17} {
		order, workers := a.lineUp(ev, n)
		for i, v := range slices.Sorted(slices.Values(order)) {
			if v != i {
				t.Errorf("n=%d: order %v is not a permutation", n, order)
				break
			}
		}
		ones := 0
		for _, w := range workers {
			if w == 1 {
				ones++
			} else if w != 2 {
				t.Errorf("n=%d: worker %d", n, w)
			}
		}
		if ones != (n+1)/2 {
			t.Errorf("n=%d: %d contenders on worker 1, %d on worker 2; want a balanced split", n, ones, n-ones)
		}
	}
}
