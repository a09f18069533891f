package river

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/harmless-dev/harmless/suite"
)

// TestCertify certifies River wired as an idempotent consumer against the
// server in HARMLESS_DSN and writes the certificate to testdata. River
// failing rules is the verdict, not a test failure; only a run that cannot
// start, or a certificate that cannot be written, fails.
func TestCertify(t *testing.T) {
	dsn := os.Getenv("HARMLESS_DSN")
	if dsn == "" {
		t.Skip("HARMLESS_DSN is not set: certifying River needs a PostgreSQL server (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")
	}
	cert, err := suite.Certify(context.Background(), Adapter(), suite.WithDSN(dsn))
	if errors.Is(err, suite.ErrSetup) {
		t.Fatalf("certify river: %v", err)
	}
	if err != nil {
		t.Errorf("certify river: %v", err)
	}
	for _, r := range cert.Rules {
		t.Logf("%-8s %s (%s): %s", r.Verdict, r.ID, r.Fixture, r.Message)
	}
	t.Logf("status %s: %s", cert.Status, cert.Summary())
	path := filepath.Join("testdata", "certificate.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatalf("create testdata: %v", err)
	}
	if err := cert.WriteJSON(path); err != nil {
		t.Fatalf("write certificate: %v", err)
	}
}
