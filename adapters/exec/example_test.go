package exec_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/harmless-dev/harmless/adapters/exec"
	"github.com/harmless-dev/harmless/suite"
)

// A consumer written in another language, here Python, is certified from
// Go as one written in Go is: Probe starts it once to learn what it
// declares, and the suite plays the fixtures against the adapter it
// returns, which runs the consumer as child processes speaking the exec
// protocol (docs/protocol.md). In a test of your own:
//
//	func TestConsumerIsHarmless(t *testing.T) {
//		adapter, info, err := exec.Probe(t.Context(), exec.Config{Command: "python3 impl.py", Dir: "consumer"})
//		if err != nil {
//			t.Fatal(err)
//		}
//		t.Logf("certifying %s, %d in flight per process", info.Implementation, info.MaxInFlight)
//		suite.Run(t, adapter)
//	}
//
// From a program, certify it with suite.Certify, as here.
func ExampleProbe() {
	ctx := context.Background()
	adapter, info, err := exec.Probe(ctx, exec.Config{
		Command: "python3 impl.py", // run with /bin/sh -c
		Dir:     "consumer",
		Env:     []string{"PYTHONPATH=src"},
	})
	if err != nil {
		log.Fatal(err) // it is not an implementation, or did not answer hello
	}
	// What the handshake settled: the name and version the child reported,
	// the protocol version it chose, and how many requests each of its
	// processes takes at once.
	log.Printf("certifying %s (protocol %d, %d in flight per process)", info.Implementation, info.Protocol, info.MaxInFlight)
	cert, err := suite.Certify(ctx, adapter)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cert.Headline())
}

// A consumer that may take two minutes over a delivery, say one that warms
// up a JVM, may be as slow to answer the probe's hello: give the probe at
// least as long as the suite gives a delivery.
func ExampleProbe_slowConsumer() {
	ctx := context.Background()
	deliveryTimeout := 2 * time.Minute
	adapter, _, err := exec.Probe(ctx, exec.Config{
		Command:      "java -jar consumer.jar",
		StartTimeout: max(deliveryTimeout, exec.DefaultStartTimeout),
	})
	if err != nil {
		log.Fatal(err)
	}
	cert, err := suite.Certify(ctx, adapter, suite.WithDeliveryTimeout(deliveryTimeout))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(cert.Headline())
}
