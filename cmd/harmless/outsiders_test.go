package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// outsiders are consumers written by other teams from docs/protocol.md
// alone (testdata/outsiders), each of which names its connections itself:
// orders_consumer.py connects without the DSN's application_name and sets
// its own in a SET after connecting, as pgjdbc does at its default
// settings; billing_consumer.py connects with its own application_name, in
// the startup packet. harmless must reach their connections all the same.
// Each takes --swallow-commit-errors, which removes its protection: a
// failed COMMIT is logged and the delivery answered applied.
var outsiders = []struct{ name, script string }{
	{"a SET after connecting", "orders_consumer.py"},
	{"its own application_name", "billing_consumer.py"},
}

// outsiderCommand is the command that runs an outsider, with args.
func outsiderCommand(t *testing.T, python, script string, args ...string) string {
	t.Helper()
	return strings.Join(append([]string{python, filepath.Join(repoRoot(t), "cmd", "harmless", "testdata", "outsiders", script)}, args...), " ")
}

// TestOutsidersThatNameTheirConnectionsAreCertified certifies each
// outsider on a throwaway cluster, so that every rule that applies runs:
// each is CERTIFIED, and the cuts of the wire proxy fired on their
// connections. Before harmless recognised an instance's connections by
// the proxy's listener they came in on, rather than by their
// application_name, both failed every failure-after-marker and
// ambiguous-commit rule, the cuts never reaching them.
func TestOutsidersThatNameTheirConnectionsAreCertified(t *testing.T) {
	python := needPsycopg(t)
	bin := binary(t)
	for _, o := range outsiders {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "c.json")
			code, stdout, stderr := runCertify(t, bin, []string{"HARMLESS_DSN=", "DATABASE_URL="},
				"--exec", outsiderCommand(t, python, o.script), "--provision", string(provision.KindCluster), "--json", path)
			if code == exitUsage && strings.Contains(stderr, provision.ErrNoDatabase.Error()) && strings.Contains(stderr, ": not found") {
				t.Skipf("no PostgreSQL server binaries for a throwaway cluster:\n%s", stderr)
			}
			cert := readCertificate(t, path)
			t.Logf("%s certified in %.1f s", o.script, cert.Duration)
			for _, r := range cert.Rules {
				if want := correctVerdict(cert, r); r.Verdict != want {
					t.Errorf("rule %s: %s; want %s\n%s", r.ID, r.Verdict, want, r.Message)
				}
			}
			for _, kind := range []string{"proxy:cut@after-statement", "proxy:cut@before-commit", "proxy:cut@after-commit-complete"} {
				if cert.Faults[kind] == 0 {
					t.Errorf("faults fired: %v; want %s", cert.Faults, kind)
				}
			}
			if code != exitCertified || !cert.Certified {
				t.Errorf("exit code %d, certified %t; want %d and certified", code, cert.Certified, exitCertified)
			}
			if t.Failed() {
				t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
		})
	}
}

// TestOutsidersWithoutTheirProtectionFail certifies each outsider with its
// protection removed (--swallow-commit-errors) on the two fixtures whose
// cuts catch it: the rules that judge a cut before COMMIT fail, which
// proves that the cuts reach a consumer however it names its connections.
func TestOutsidersWithoutTheirProtectionFail(t *testing.T) {
	python := needPsycopg(t)
	bin := binary(t)
	dsn := pgtest.DSN(t)
	for _, o := range outsiders {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "c.json")
			code, stdout, stderr := runCertify(t, bin, nil, "--exec", outsiderCommand(t, python, o.script, "--swallow-commit-errors"), "--dsn", dsn,
				"--fixture", catalogid.FailureAfterMarker+","+catalogid.AmbiguousCommit, "--json", path)
			cert := readCertificate(t, path)
			verdicts := map[string]certificate.Verdict{}
			for _, r := range cert.Rules {
				verdicts[r.ID] = r.Verdict
			}
			for _, id := range []string{catalogid.AmbiguousCommitLostCommitApplies, catalogid.FailureAfterMarkerNotAcknowledged} {
				if verdicts[id] != certificate.VerdictFail {
					t.Errorf("rule %s: %s; want fail", id, verdicts[id])
				}
			}
			if cert.Faults["proxy:cut@before-commit"] == 0 {
				t.Errorf("faults fired: %v; want the cuts before COMMIT", cert.Faults)
			}
			if code != exitNotCertified {
				t.Errorf("exit code %d; want %d", code, exitNotCertified)
			}
			if t.Failed() {
				t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
		})
	}
}
