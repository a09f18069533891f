package main

import (
	"os"
	"os/exec"
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
// its own in a SET after connecting; billing_consumer.py connects with its
// own application_name, in the startup packet; ShipmentsConsumer.java
// connects with pgjdbc at its default settings, from setup's connection
// parts, and pgjdbc sends the name in a SET after the startup. harmless
// must reach their connections all the same. Each takes
// --swallow-commit-errors, which removes its protection: a failed COMMIT
// is logged and the delivery answered applied.
var outsiders = []struct {
	name    string
	command func(t *testing.T, args ...string) string // skips the test when its runtime is missing
}{
	{"a SET after connecting", pythonOutsider("orders_consumer.py")},
	{"its own application_name", pythonOutsider("billing_consumer.py")},
	{"pgjdbc at its default settings", javaOutsider("ShipmentsConsumer")},
}

// outsidersDir is where the outsiders' sources are.
func outsidersDir(t *testing.T) string {
	return filepath.Join(repoRoot(t), "cmd", "harmless", "testdata", "outsiders")
}

// pythonOutsider returns the command that runs the Python outsider script.
func pythonOutsider(script string) func(t *testing.T, args ...string) string {
	return func(t *testing.T, args ...string) string {
		t.Helper()
		python := needPsycopg(t)
		return strings.Join(append([]string{python, filepath.Join(outsidersDir(t), script)}, args...), " ")
	}
}

// pgjdbcJar is where Debian's libpostgresql-jdbc-java puts pgjdbc.
const pgjdbcJar = "/usr/share/java/postgresql.jar"

// javaOutsider returns the command that runs the Java outsider class,
// compiled from its one source file into the test's temporary directory.
// It skips the test, saying why, when javac or pgjdbc is missing, unless
// HARMLESS_REQUIRE_JAVA=1 (as .ci/run sets, having installed both) makes
// that a failure.
func javaOutsider(class string) func(t *testing.T, args ...string) string {
	return func(t *testing.T, args ...string) string {
		t.Helper()
		skip := t.Skipf
		if os.Getenv("HARMLESS_REQUIRE_JAVA") == "1" {
			skip = t.Fatalf
		}
		javac, err := exec.LookPath("javac")
		if err != nil {
			skip("the Java outsider needs a JDK (Debian: apt-get install default-jdk-headless): %v", err)
		}
		if _, err := os.Stat(pgjdbcJar); err != nil {
			skip("the Java outsider needs pgjdbc (Debian: apt-get install libpostgresql-jdbc-java): %v", err)
		}
		classes := t.TempDir()
		out, err := exec.Command(javac, "-d", classes, "-cp", pgjdbcJar, filepath.Join(outsidersDir(t), class+".java")).CombinedOutput()
		if err != nil {
			t.Fatalf("javac %s: %v\n%s", class, err, out)
		}
		// Each instance is a JVM of its own, started and stopped many
		// times in a certification: C1 only and the serial collector, as
		// a team would run short-lived processes, cost less of the two
		// cores go test ./... shares (a JVM filling a list of 200,000
		// strings: 0.08 s of CPU against 0.13 s).
		return strings.Join(append([]string{"exec", "java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", classes + ":" + pgjdbcJar, class}, args...), " ")
	}
}

// TestOutsidersThatNameTheirConnectionsAreCertified certifies each
// outsider on a throwaway cluster, so that every rule that applies runs:
// each is CERTIFIED, and the cuts of the wire proxy fired on their
// connections. Before harmless recognised an instance's connections by
// the proxy's listener they came in on, rather than by their
// application_name, both failed every failure-after-marker and
// ambiguous-commit rule, the cuts never reaching them.
func TestOutsidersThatNameTheirConnectionsAreCertified(t *testing.T) {
	t.Parallel() // beside the other long tests of the package
	bin := binary(t)
	for _, o := range outsiders {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			command := o.command(t)
			path := filepath.Join(t.TempDir(), "c.json")
			code, stdout, stderr := runCertify(t, bin, unset("HARMLESS_DSN", "DATABASE_URL"),
				"--exec", command, "--provision", string(provision.KindCluster), "--json", path)
			if code == exitUsage && strings.Contains(stderr, provision.ErrNoDatabase.Error()) && strings.Contains(stderr, ": not found") {
				t.Skipf("no PostgreSQL server binaries for a throwaway cluster:\n%s", stderr)
			}
			cert := readCertificate(t, path)
			t.Logf("%s certified in %.1f s", cert.Adapter, cert.Duration)
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
	t.Parallel() // beside the other long tests of the package
	bin := binary(t)
	dsn := pgtest.DSN(t)
	for _, o := range outsiders {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			command := o.command(t, "--swallow-commit-errors")
			path := filepath.Join(t.TempDir(), "c.json")
			code, stdout, stderr := runCertify(t, bin, nil, "--exec", command, "--dsn", dsn,
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
