// Package certifytest certifies an integration's adapter from its package's
// tests, the same way for every library.
//
// A library failing rules is the verdict, not a test failure: Certify fails
// the test only when the run could not be set up. The certificate is written
// to testdata/certificate.json only with -update, so that running the tests
// never changes the tracked files; the verdict table is made from those
// certificates.
package certifytest

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
)

var update = flag.Bool("update", false, "write the certificate to testdata/certificate.json")

// DSN returns $HARMLESS_DSN, or skips the test saying why.
func DSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("HARMLESS_DSN")
	if dsn == "" {
		t.Skip("HARMLESS_DSN is not set: certifying a library needs a PostgreSQL server (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")
	}
	return dsn
}

// Certify certifies adapter on $HARMLESS_DSN, logs every rule's verdict and
// returns the certificate; with -update it also writes it to
// testdata/certificate.json.
func Certify(t *testing.T, adapter adapters.Adapter) certificate.Certificate {
	t.Helper()
	cert, err := suite.Certify(context.Background(), adapter, suite.WithDSN(DSN(t)))
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
	t.Logf("%s: %s (%s)", adapter.Name, cert.Status, cert.Summary())
	if *update {
		path := filepath.Join("testdata", "certificate.json")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := cert.WriteJSON(path); err != nil {
			t.Fatalf("write %s: %v", path, err)
		}
	}
	return cert
}
