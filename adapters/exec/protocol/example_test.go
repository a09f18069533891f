package protocol_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/exec/protocol"
)

// claims stands in for the implementation's database: the payload and the
// time of each event it has claimed. A real implementation claims the event
// and runs the effect setup described in one transaction of its own.
type claims map[string]claim

type claim struct {
	payload string
	at      time.Time
}

// serve is the whole of a Go implementation certified as a child process
// (harmless certify --exec "go run ./cmd/consumer"): it reads the harness's
// requests from in, one a line, and writes one answer a line to out, one
// request at a time, until shutdown.
func serve(in io.Reader, out io.Writer) error {
	store := claims{}
	lines := protocol.NewLineReader(in, protocol.MaxRequestBytes)
	for {
		line, err := lines.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read a request: %w", err)
		}
		req, err := protocol.DecodeRequest(line)
		if err != nil {
			return fmt.Errorf("read a request: %w", err)
		}
		answer, err := store.handle(req)
		if err != nil {
			return fmt.Errorf("answer %s request %d: %w", req.Method, req.ID, err)
		}
		if _, err := out.Write(answer); err != nil {
			return fmt.Errorf("answer %s request %d: %w", req.Method, req.ID, err)
		}
		if req.Method == protocol.MethodShutdown {
			return nil
		}
	}
}

// handle answers one request with its line.
func (c claims) handle(req protocol.IncomingRequest) ([]byte, error) {
	switch req.Method {
	case protocol.MethodHello:
		return protocol.EncodeResult(req.ID, protocol.HelloResult{
			Protocol:       protocol.Version,
			Implementation: protocol.Implementation{Name: "my-consumer", Version: "1.0"},
			Declares:       adapters.Declaration{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: 24 * time.Hour, AcceptsClock: true},
			MaxInFlight:    1,
		})
	case protocol.MethodSetup, protocol.MethodShutdown:
		return protocol.EncodeResult(req.ID, nil)
	case protocol.MethodDeliver:
		var p protocol.DeliverParams
		if err := json.Unmarshal(req.Params, &p); err != nil {
			// Answered like a database error: not acknowledged, so
			// the harness redelivers.
			return protocol.EncodeError(req.ID, protocol.Transient, err.Error())
		}
		outcome := c.claim(p)
		return protocol.EncodeResult(req.ID, protocol.DeliverResult{Outcome: protocol.OutcomeName(outcome)})
	case protocol.MethodPurge:
		var p protocol.PurgeParams
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return protocol.EncodeError(req.ID, protocol.Transient, err.Error())
		}
		removed := c.purge(p.Cutoff)
		return protocol.EncodeResult(req.ID, protocol.PurgeResult{Removed: &removed})
	}
	// drain is optional: answering unsupported says so.
	return protocol.EncodeError(req.ID, protocol.Unsupported, "unknown method "+req.Method)
}

// claim records the event once: a redelivery of the same payload is a
// duplicate, another payload under the same identity is rejected.
func (c claims) claim(p protocol.DeliverParams) adapters.Outcome {
	key := string(p.Namespace) + "\x00" + string(p.EventID)
	if prev, ok := c[key]; ok {
		if prev.payload != string(p.Payload) {
			return adapters.Rejected
		}
		return adapters.Duplicate
	}
	at := time.Now()
	if p.Now != nil { // the harness's clock, since hello declares accepts_clock
		at = *p.Now
	}
	c[key] = claim{payload: string(p.Payload), at: at}
	return adapters.Applied
}

// purge forgets the claims made before cutoff.
func (c claims) purge(cutoff time.Time) int64 {
	var removed int64
	for key, cl := range c {
		if cl.at.Before(cutoff) {
			delete(c, key)
			removed++
		}
	}
	return removed
}

// A Go implementation of the child side reads requests with DecodeRequest
// and writes answers with EncodeResult and EncodeError; its main is
// serve(os.Stdin, os.Stdout). Here it answers a hello, one event delivered
// three times (the third time with another payload), a purge, an optional
// drain it does not implement, and shutdown.
func ExampleDecodeRequest() {
	requests := strings.Join([]string{
		`{"id":1,"method":"hello","params":{"protocols":[1],"harness":"v1"}}`,
		`{"id":2,"method":"deliver","params":{"namespace":"b3JkZXJz","event_id":"NDI=","payload":"YQ==","attempt":1,"now":"2026-01-01T00:00:00Z"}}`,
		`{"id":3,"method":"deliver","params":{"namespace":"b3JkZXJz","event_id":"NDI=","payload":"YQ==","attempt":2}}`,
		`{"id":4,"method":"deliver","params":{"namespace":"b3JkZXJz","event_id":"NDI=","payload":"Yg==","attempt":1}}`,
		`{"id":5,"method":"purge","params":{"cutoff":"2026-01-02T00:00:00Z"}}`,
		`{"id":6,"method":"drain"}`,
		`{"id":7,"method":"shutdown"}`,
	}, "\n") + "\n"
	if err := serve(strings.NewReader(requests), os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {"id":1,"result":{"protocol":1,"implementation":{"name":"my-consumer","version":"1.0"},"declares":{"conflict_policy":"reject","redelivery_window_s":86400,"accepts_clock":true},"max_in_flight":1}}
	// {"id":2,"result":{"outcome":"applied"}}
	// {"id":3,"result":{"outcome":"duplicate"}}
	// {"id":4,"result":{"outcome":"rejected"}}
	// {"id":5,"result":{"removed":1}}
	// {"id":6,"error":{"class":"unsupported","message":"unknown method drain"}}
	// {"id":7,"result":{}}
}
