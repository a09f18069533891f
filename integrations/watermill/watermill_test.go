package watermill

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/harmless-dev/harmless/suite"
)

// dsn returns the server the tests run against, or skips the test.
func dsn(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("HARMLESS_DSN")
	if dsn == "" {
		t.Skip("HARMLESS_DSN is not set: these tests need a PostgreSQL server, e.g. HARMLESS_DSN=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	}
	return dsn
}

// TestCertify certifies the adapter and writes the certificate to
// testdata/certificate.json. Rules watermill fails are the verdict, not a
// test failure: it fails only when the run could not be set up.
func TestCertify(t *testing.T) {
	dsn := dsn(t)
	cert, err := suite.Certify(context.Background(), Adapter(), suite.WithDSN(dsn), suite.WithLogf(t.Logf))
	if err != nil {
		t.Fatalf("certify: %v", err)
	}
	for _, r := range cert.Rules {
		t.Logf("%-50s %-13s %s", r.ID, r.Verdict, r.Message)
	}
	t.Logf("status: %s", cert.Status)
	if err := cert.WriteJSON(filepath.Join("testdata", "certificate.json")); err != nil {
		t.Fatalf("write certificate: %v", err)
	}
}
