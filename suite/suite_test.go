package suite_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// TestOptionsReachTheSuite: each option of the public package reaches the
// suite behind it. A run on a server that refuses connections cannot
// start, which is quick, and its certificate still records the options.
// (WithLogf is given, but such a run logs nothing; the outsider tests and
// the integrations see its lines.)
func TestOptionsReachTheSuite(t *testing.T) {
	var got []certificate.Certificate
	cert, err := suite.Certify(t.Context(), reference.Adapter(),
		suite.WithDSN("postgres://nobody@127.0.0.1:1/none?connect_timeout=2"),
		suite.WithProvisioning("dsn"),
		suite.WithSeed(42),
		suite.WithRedeliveryPatience(3*time.Second),
		suite.WithDeliveryTimeout(5*time.Second),
		suite.WithLogf(t.Logf),
		suite.WithCertificate(func(c certificate.Certificate) { got = append(got, c) }),
	)
	if !errors.Is(err, suite.ErrSetup) {
		t.Fatalf("Certify on a closed port: %v; want an error wrapping ErrSetup", err)
	}
	if !strings.Contains(cert.Error, "127.0.0.1") {
		t.Errorf("the certificate's error %q does not name the server WithDSN gave", cert.Error)
	}
	if cert.Seed != 42 {
		t.Errorf("seed %d; want 42 (WithSeed)", cert.Seed)
	}
	if cert.Redelivery.Patience != 3 {
		t.Errorf("the broker's patience %gs; want 3s (WithRedeliveryPatience)", cert.Redelivery.Patience)
	}
	if len(got) != 1 || got[0].Adapter != reference.Name {
		t.Errorf("WithCertificate's function got %d certificates; want the reference's", len(got))
	}
}

// TestAZeroOptionIsIgnored: the zero Option, which a caller can write,
// changes nothing rather than crashing the run.
func TestAZeroOptionIsIgnored(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := suite.Certify(ctx, reference.Adapter(), suite.Option{}, suite.WithDSN("postgres://nobody@127.0.0.1:1/none?connect_timeout=2"))
	if err == nil {
		t.Fatal("Certify with a cancelled context and a closed port returned no error")
	}
}

// TestWithProvisioningForcesTheWay: forcing the container way without
// WithContainers fails saying what to pass, rather than falling back to
// another way.
func TestWithProvisioningForcesTheWay(t *testing.T) {
	_, err := suite.Certify(t.Context(), reference.Adapter(), suite.WithProvisioning("container"))
	if !errors.Is(err, suite.ErrSetup) || !strings.Contains(err.Error(), "docker.Start") {
		t.Fatalf("Certify forced to a container without WithContainers: %v; want ErrSetup saying to pass docker.Start", err)
	}
}
