package rbaliyanevent_test

import (
	"testing"

	"github.com/harmless-dev/harmless/integrations/internal/certifytest"
	"github.com/harmless-dev/harmless/integrations/rbaliyanevent"
)

// TestCertify certifies rbaliyan/event's PostgreSQL idempotency store on
// $HARMLESS_DSN (-update writes the certificate to
// testdata/certificate.json).
func TestCertify(t *testing.T) {
	certifytest.Certify(t, rbaliyanevent.Adapter())
}
