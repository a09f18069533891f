package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// FuzzDecodeResponse holds the answer decoder to its contract on any input:
// it never panics; what it accepts has a valid id and exactly one of a
// result object and an error with a known class; what it rejects is a
// protocol violation; and an accepted answer survives re-encoding.
func FuzzDecodeResponse(f *testing.F) {
	for _, seed := range []string{
		`{"id":1,"result":{}}`,
		`{"id":2,"result":{"outcome":"applied"}}`,
		`{"id":3,"error":{"class":"transient","message":"x"}}`,
		`{"id":9007199254740991,"error":{"class":"payload_conflict"}}`,
		`{"id":1,"result":{"protocol":1,"implementation":{"name":"n"},"declares":{"conflict_policy":"reject","redelivery_window_s":86400,"accepts_clock":true},"max_in_flight":8}}`,
		`{"id":1,"result":{"protocol":1,"implementation":{"name":"n"},"declares":{"conflict_policy":"reject","external_effects":"outbox"}}}`,
		`{"id":1,"result":{"protocol":1,"implementation":{"name":"n"},"declares":{"external_effects":"destination-idempotency"}}}`,
		`{"id":1,"result":{"protocol":1,"implementation":{"name":"n"},"declares":{"external_effects":"smtp"}}}`,
		`{"id":1,"result":{"removed":3}}`,
		`{"id":4,"error":{"class":"unsupported","message":"unknown method drain"}}`,
		`{"id":0}`, `[]`, `{"id":1,"result":null,"error":null}`, "\xff{", `{"id":1e2}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		resp, err := DecodeResponse(line)
		if err != nil {
			if !errors.Is(err, ErrViolation) {
				t.Fatalf("an error that is not a violation: %v", err)
			}
			return
		}
		if resp.ID == 0 || resp.ID > maxID {
			t.Fatalf("accepted id %d", resp.ID)
		}
		if (resp.Result == nil) == (resp.Error == nil) {
			t.Fatalf("accepted %q with result %q and error %v", line, resp.Result, resp.Error)
		}
		var again []byte
		if resp.Error != nil {
			if !resp.Error.Class.valid() {
				t.Fatalf("accepted class %q", resp.Error.Class)
			}
			again, err = EncodeError(resp.ID, resp.Error.Class, resp.Error.Message)
		} else {
			if !json.Valid(resp.Result) || !isObject(resp.Result) {
				t.Fatalf("accepted result %q", resp.Result)
			}
			again, err = EncodeResult(resp.ID, resp.Result)
		}
		if err != nil {
			return // a result near the line limit can grow past it when compacted
		}
		back, err := DecodeResponse(bytes.TrimSuffix(again, []byte("\n")))
		if err != nil || back.ID != resp.ID || (back.Error == nil) != (resp.Error == nil) {
			t.Fatalf("re-encoded %q does not decode alike: %+v, %v", again, back, err)
		}
		// The typed decoders never panic on an accepted result either.
		if resp.Result != nil {
			_, _ = DecodeHello(resp.Result, Versions)
			_, _ = DecodeOutcome(resp.Result)
			_, _ = DecodePurge(resp.Result)
		}
	})
}

// FuzzDecodeRequest holds the request decoder, used by Go children, to the
// same contract.
func FuzzDecodeRequest(f *testing.F) {
	for _, seed := range []string{
		`{"id":1,"method":"hello","params":{"protocols":[1]}}`,
		`{"id":2,"method":"deliver","params":{"namespace":"bnM=","event_id":"MQ==","payload":"","attempt":1,"effect_args":["bnM=","MQ==","ab",1]}}`,
		`{"id":2,"method":"setup","params":{"instance":1,"dsn":"postgres://h/d","schema":"s","effect":{"sql":"SELECT $1","params":[{"name":"a","type":"int4"}]},"destination":"http://127.0.0.1:4242"}}`,
		`{"id":2,"method":"setup","params":{"instance":1,"dsn":"postgres://u:p@h:1,h:2/d","connection":{"hosts":["h","h"],"ports":[1,2],"user":"u","password":"p","database":"d","parameters":{"sslmode":"disable"}},"schema":"s"}}`,
		`{"id":4,"method":"drain","params":{}}`, `{"id":4,"method":"drain"}`,
		`{"id":3,"method":"shutdown"}`, `{"id":3,"method":""}`, `{"id":3,"method":"x","params":[]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		req, err := DecodeRequest(line)
		if err != nil {
			if !errors.Is(err, ErrViolation) {
				t.Fatalf("an error that is not a violation: %v", err)
			}
			return
		}
		if req.ID == 0 || req.ID > maxID || req.Method == "" || !isObject(req.Params) {
			t.Fatalf("accepted %q as %+v", line, req)
		}
		var p DeliverParams
		_ = json.Unmarshal(req.Params, &p)
		var s SetupParams
		_ = json.Unmarshal(req.Params, &s)
	})
}

// FuzzLineReader holds the framing to its contract: lines never exceed the
// limit, and the lines read, each followed by "\n", are a prefix of the
// input.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("a\nbb\n"), uint8(2))
	f.Add([]byte("abc"), uint8(5))
	f.Add([]byte("\n\n\n"), uint8(0))
	f.Fuzz(func(t *testing.T, data []byte, limit uint8) {
		r := NewLineReader(bytes.NewReader(data), int(limit))
		var read []byte
		for {
			line, err := r.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, errLineTooLong) {
					t.Fatalf("unexpected error %v", err)
				}
				if errors.Is(err, io.EOF) && !bytes.Equal(read, data) {
					t.Fatalf("clean end after %q of %q", read, data)
				}
				break
			}
			if len(line) > int(limit) {
				t.Fatalf("a %d-byte line with a limit of %d", len(line), limit)
			}
			read = append(append(read, line...), '\n')
			if !bytes.HasPrefix(data, read) {
				t.Fatalf("read %q, which is not a prefix of %q", read, data)
			}
		}
	})
}
