package dtm_test

import (
	"testing"

	"github.com/harmless-dev/harmless/integrations/dtm"
	"github.com/harmless-dev/harmless/integrations/internal/certifytest"
)

// TestCertify certifies dtm's barrier on $HARMLESS_DSN (-update writes the
// certificate to testdata/certificate.json).
func TestCertify(t *testing.T) {
	certifytest.Certify(t, dtm.Adapter())
}
