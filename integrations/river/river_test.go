package river

import (
	"testing"

	"github.com/harmless-dev/harmless/integrations/internal/certifytest"
)

// TestCertify certifies River's unique jobs on $HARMLESS_DSN (-update writes
// the certificate to testdata/certificate.json).
func TestCertify(t *testing.T) {
	certifytest.Certify(t, Adapter())
}
