package dtm_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/harmless-dev/harmless/integrations/dtm"
	"github.com/harmless-dev/harmless/suite"
)

// TestCertify certifies dtm's barrier against $HARMLESS_DSN and writes the
// certificate to testdata/certificate.json. The library failing rules is
// the verdict, not a test failure; only a setup error fails the test.
func TestCertify(t *testing.T) {
	dsn := os.Getenv("HARMLESS_DSN")
	if dsn == "" {
		t.Skip("HARMLESS_DSN is not set: certifying dtm needs a PostgreSQL server (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")
	}
	cert, err := suite.Certify(context.Background(), dtm.Adapter(), suite.WithDSN(dsn))
	if errors.Is(err, suite.ErrSetup) {
		t.Fatalf("certify %s: %v", dtm.Name, err)
	}
	if err != nil {
		t.Logf("certify %s: %v", dtm.Name, err)
	}
	for _, r := range cert.Rules {
		t.Logf("%-8s %-14s %s: %s", r.Verdict, r.Level, r.ID, r.FirstLine())
	}
	t.Logf("status %s: %s", cert.Status, cert.Summary())
	if len(cert.Rules) == 0 {
		t.Fatalf("certify %s: the certificate has no rules (%s)", dtm.Name, cert.Error)
	}
	path := filepath.Join("testdata", "certificate.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := cert.WriteJSON(path); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}
