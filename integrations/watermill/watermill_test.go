package watermill

import (
	"testing"

	"github.com/harmless-dev/harmless/integrations/internal/certifytest"
)

// dsn returns the server the tests run against, or skips the test.
func dsn(t *testing.T) string { return certifytest.DSN(t) }

// TestCertify certifies watermill's Deduplicator on $HARMLESS_DSN (-update
// writes the certificate to testdata/certificate.json).
func TestCertify(t *testing.T) {
	certifytest.Certify(t, Adapter())
}
