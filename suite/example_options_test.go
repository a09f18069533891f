package suite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
	"github.com/harmless-dev/harmless/suite/docker"
)

// myAdapter stands for the adapter of ExampleRun.
var myAdapter adapters.Adapter

// RunWith takes options for every adapter it certifies: here the database
// of the CI job, a fixed seed to replay a failure, a broker that waits
// longer for an implementation with a 20 s lease, and the certificate for
// the job's artifacts.
func ExampleRunWith() {
	certify := func(t *testing.T) {
		suite.RunWith(t, []suite.Option{
			suite.WithDSN(os.Getenv("CI_DATABASE_URL")),
			suite.WithSeed(12345),
			suite.WithRedeliveryPatience(30 * time.Second),
			suite.WithDeliveryTimeout(20 * time.Second),
			suite.WithCertificate(func(c certificate.Certificate) {
				if err := c.WriteJSON("harmless-certificate.json"); err != nil {
					t.Error(err)
				}
			}),
		}, myAdapter)
	}
	_ = certify // func TestConformance(t *testing.T) { certify(t) }
}

// Without a DSN the suite starts PostgreSQL itself: in a container when it
// is given the container engine and one runs, else in a throwaway cluster
// from local server binaries. WithProvisioning forces the container way,
// so that a CI without a container engine fails instead of falling back.
func ExampleWithContainers() {
	certify := func(t *testing.T) {
		suite.RunWith(t, []suite.Option{
			suite.WithContainers(docker.Start),
			suite.WithProvisioning("container"),
		}, myAdapter)
	}
	_ = certify
}

// Certify runs the suite from a program and returns the certificate; an
// error wrapping ErrSetup means the run could not start, and the
// certificate says why.
func ExampleCertify() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cert, err := suite.Certify(ctx, myAdapter, suite.WithLogf(func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, format+"\n", args...)
	}))
	switch {
	case errors.Is(err, suite.ErrSetup):
		fmt.Println("could not start:", cert.Error)
	case err != nil:
		fmt.Println(err)
	default:
		fmt.Println(cert.Headline(), cert.Summary())
	}
}
