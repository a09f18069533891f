package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// referenceCert is a certificate of the reference on a throwaway cluster
// as the registry wants it: every rule passed, but the failover fixture's,
// which do not apply to one server.
func referenceCert() certificate.Certificate {
	c := certificate.Certificate{Adapter: "reference", Status: certificate.StatusCertified, Certified: true, DatabaseKind: "cluster"}
	for _, r := range fixtures.Rules() {
		v := certificate.VerdictPass
		if r.Fixture == "failover" {
			v = certificate.VerdictNotApplicable
		}
		c.Rules = append(c.Rules, certificate.RuleResult{ID: r.ID, Fixture: r.Fixture, Level: r.Level, Verdict: v})
	}
	return c
}

func writeCert(t *testing.T, dir string, c certificate.Certificate) {
	t.Helper()
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, c.Adapter+".json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestComparesByRule(t *testing.T) {
	before, after := t.TempDir(), t.TempDir()
	writeCert(t, before, referenceCert())
	moved := referenceCert()
	moved.Rules[3].Verdict = certificate.VerdictFail
	moved.Status, moved.Certified = certificate.StatusNotCertified, false
	writeCert(t, after, moved)

	var stdout, stderr bytes.Buffer
	if code := run([]string{before}, &stdout, &stderr); code != 0 {
		t.Fatalf("a certificate as the registry wants it: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := run([]string{before, after}, &stdout, &stderr); code != 1 {
		t.Fatalf("a verdict that moved: exit %d; want 1\n%s", code, stdout.String())
	}
	for _, want := range []string{"rule " + moved.Rules[3].ID + ": pass before, fail after", "1 moved", "but the registry says it must be certified"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, stdout.String())
		}
	}
}

func TestBadInputIsExit2(t *testing.T) {
	empty, misnamed := t.TempDir(), t.TempDir()
	c := referenceCert()
	writeCert(t, misnamed, c)
	if err := os.Rename(filepath.Join(misnamed, "reference.json"), filepath.Join(misnamed, "alt-slow.json")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{nil, {empty}, {misnamed}, {"a", "b", "c"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("comparecerts %q: exit %d, stderr %q; want 2 with an error", args, code, stderr.String())
		}
	}
}
