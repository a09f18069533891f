package certificate

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
)

// TestJSON: the certificate's JSON has the fields docs/reports.md lists,
// the capabilities in the exec protocol's shape, and reads back whole.
func TestJSON(t *testing.T) {
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
	if got, want := string(fields["verified"]), `{"conflict_policy":"","redelivery_window_s":3600,"accepts_clock":true}`; got != want {
		t.Errorf("verified %s; want %s", got, want)
	}
	// The suite's version is suite_version, once: the harness holds only
	// the commit.
	if got, want := string(fields["harness"]), `{"commit":"0123abcd-dirty"}`; got != want {
		t.Errorf("harness %s; want %s", got, want)
	}

	p := Protocol{Name: "harmless-exec", Version: 1, Command: "./consumer --harmless", Implementation: "consumer 1.4.2", MaxInFlight: 8}
	c.Protocol = &p
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
	if back.Declared != c.Declared || back.Verified != c.Verified || back.SuiteVersion != c.SuiteVersion || back.Harness != c.Harness || len(back.Rules) != len(c.Rules) {
		t.Errorf("read back declared %+v, verified %+v, suite %q, harness %+v, %d rules; want %+v, %+v, %q, %+v, %d",
			back.Declared, back.Verified, back.SuiteVersion, back.Harness, len(back.Rules), c.Declared, c.Verified, c.SuiteVersion, c.Harness, len(c.Rules))
	}
}

// TestDeclaredSendDelay: a declared max send delay is in declared, in
// seconds beside external_effects, and never in verified: no rule tests
// it. The Markdown shows both.
func TestDeclaredSendDelay(t *testing.T) {
	c := sampleCertificate()
	c.Declared = adapters.Declaration{ExternalEffects: adapters.Outbox, MaxSendDelay: 3 * time.Second}
	c.Rules = ruleVerdicts(VerdictPass, nil)
	c.Verified = Verify(c.Declared, c.Rules)
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatal(err)
	}
	if got, want := string(fields["declared"]), `{"conflict_policy":"","redelivery_window_s":0,"accepts_clock":false,"external_effects":"outbox","max_send_delay_s":3}`; got != want {
		t.Errorf("declared %s; want %s", got, want)
	}
	if got, want := string(fields["verified"]), `{"conflict_policy":"","redelivery_window_s":0,"accepts_clock":false,"external_effects":"outbox"}`; got != want {
		t.Errorf("verified %s; want %s", got, want)
	}
	var back Certificate
	if err := json.Unmarshal(data, &back); err != nil || back.Declared != c.Declared {
		t.Errorf("declared reads back as %+v (%v); want %+v", back.Declared, err, c.Declared)
	}
	var b bytes.Buffer
	if err := c.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| declared | external effects outbox, max send delay 3s |",
		"| verified | external effects outbox |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the Markdown has no line %q:\n%s", want, b.String())
		}
	}
}
