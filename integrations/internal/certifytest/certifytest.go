// Package certifytest certifies an integration's adapter from its package's
// tests, the same way for every library.
//
// A library failing rules is the verdict, not a test failure: Certify fails
// the test when the run could not be set up, and when a rule's verdict
// differs from the committed certificate (testdata/certificate.json), since
// the verdict table is made from those certificates and would no longer
// tell the truth. -update writes the new certificate instead, so that
// running the tests never changes the tracked files unasked.
package certifytest

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
)

var update = flag.Bool("update", false, "write the certificate to testdata/certificate.json")

// CertificatePath is where a package keeps its library's certificate,
// relative to the package's directory.
const CertificatePath = "testdata/certificate.json"

// DSN returns $HARMLESS_DSN, or skips the test saying why. The
// reproductions need a server they can reach directly; certification does
// not (see [Certify]).
func DSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("HARMLESS_DSN")
	if dsn == "" {
		t.Skip("HARMLESS_DSN is not set: a reproduction needs a PostgreSQL server (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")
	}
	return dsn
}

// Certify certifies adapter, logs every rule's verdict, checks the verdicts
// against the committed certificate and returns the certificate; with
// -update it writes the certificate instead of checking it.
//
// The database is chosen as the harmless command chooses it: $HARMLESS_DSN,
// else a throwaway cluster from local server binaries, and
// $HARMLESS_PROVISION=cluster forces the cluster even with a DSN set. Only a
// server the run owns can be crashed, so only there do the crash-recovery
// rules run; the committed certificates are made there.
func Certify(t *testing.T, adapter adapters.Adapter) certificate.Certificate {
	t.Helper()
	cert, err := suite.Certify(context.Background(), adapter, suite.WithLogf(t.Logf))
	if errors.Is(err, suite.ErrSetup) || len(cert.Rules) == 0 {
		t.Fatalf("certify %s: %v %s", adapter.Name, err, cert.Error)
	}
	if err != nil {
		// The run judged, but could not release its database.
		t.Errorf("certify %s: %v", adapter.Name, err)
	}
	for _, r := range cert.Rules {
		t.Logf("%-14s %-8s %s: %s", r.Verdict, r.Level, r.ID, r.FirstLine())
	}
	t.Logf("%s on a %s server: %s (%s)", adapter.Name, cert.DatabaseKind, cert.Status, cert.Summary())
	if *update {
		if err := os.MkdirAll(filepath.Dir(CertificatePath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := cert.WriteJSON(CertificatePath); err != nil {
			t.Fatalf("write %s: %v", CertificatePath, err)
		}
		return cert
	}
	committed, err := Read(CertificatePath)
	if err != nil {
		t.Fatalf("%v; run go test -update to write it", err)
	}
	for _, d := range Drift(committed, cert) {
		t.Errorf("%s; if the new verdict is right, run go test -update here and go generate ./... to rewrite the certificate and the verdict table", d)
	}
	return cert
}

// Read reads a certificate written by [Certify].
func Read(path string) (certificate.Certificate, error) {
	var c certificate.Certificate
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read the committed certificate: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("read the committed certificate %s: %w", path, err)
	}
	return c, nil
}

// Drift lists the rules whose verdict in run differs from the one in
// committed, and the rules only one of them has. A rule that is
// not-supported in one of them is left out when the two ran on different
// kinds of server: on a server it does not own the harness cannot crash
// the database, so the crash-recovery rules do not run there, and that is
// no change of the library's verdict.
func Drift(committed, run certificate.Certificate) []string {
	before := map[string]certificate.RuleResult{}
	for _, r := range committed.Rules {
		before[r.ID] = r
	}
	var drift []string
	for _, r := range run.Rules {
		old, ok := before[r.ID]
		delete(before, r.ID)
		switch {
		case !ok:
			drift = append(drift, fmt.Sprintf("rule %s (%s in this run) is not in the committed certificate", r.ID, r.Verdict))
		case old.Verdict == r.Verdict:
		case committed.DatabaseKind != run.DatabaseKind &&
			(old.Verdict == certificate.VerdictNotSupported || r.Verdict == certificate.VerdictNotSupported):
		default:
			drift = append(drift, fmt.Sprintf("rule %s: %s in the committed certificate (on a %s server), %s in this run (on a %s server): %s",
				r.ID, old.Verdict, committed.DatabaseKind, r.Verdict, run.DatabaseKind, r.FirstLine()))
		}
	}
	for _, r := range committed.Rules {
		if _, gone := before[r.ID]; gone {
			drift = append(drift, fmt.Sprintf("rule %s (%s in the committed certificate) did not run", r.ID, r.Verdict))
		}
	}
	return drift
}
