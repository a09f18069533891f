package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
)

func TestDecodeResponseAcceptsTheSpecifiedShapes(t *testing.T) {
	for _, tc := range []struct {
		line   string
		id     uint64
		result string
		class  ErrorClass
	}{
		{`{"id":1,"result":{}}`, 1, `{}`, ""},
		{` {"id": 9007199254740991, "result": {"outcome": "applied"}, "extra": [1]}`, maxID, `{"outcome": "applied"}`, ""},
		{`{"id":3,"error":{"class":"transient","message":"try again"}}`, 3, "", Transient},
		{`{"id":4,"result":null,"error":{"class":"unsupported"}}`, 4, "", Unsupported},
		{`{"error":{"class":"invalid_input"},"id":5}`, 5, "", InvalidInput},
	} {
		resp, err := DecodeResponse([]byte(tc.line))
		if err != nil {
			t.Errorf("%s: %v", tc.line, err)
			continue
		}
		if resp.ID != tc.id || string(resp.Result) != tc.result {
			t.Errorf("%s: id %d result %s", tc.line, resp.ID, resp.Result)
		}
		if (resp.Error == nil) != (tc.class == "") || (resp.Error != nil && resp.Error.Class != tc.class) {
			t.Errorf("%s: error %+v, want class %q", tc.line, resp.Error, tc.class)
		}
	}
}

func TestDecodeResponseRejectsViolations(t *testing.T) {
	for line, want := range map[string]string{
		``:                                        "not a JSON object",
		`[1]`:                                     "not a JSON object",
		`"hello"`:                                 "not a JSON object",
		`{"id":1,"result":{}`:                     "not valid JSON",
		`{"id":1,"result":{}} {"id":2}`:           "not valid JSON",
		`{"result":{}}`:                           "has no id",
		`{"id":null,"result":{}}`:                 "has no id",
		`{"id":0,"result":{}}`:                    "not an integer from 1",
		`{"id":-1,"result":{}}`:                   "not an integer from 1",
		`{"id":1.5,"result":{}}`:                  "not an integer from 1",
		`{"id":1e3,"result":{}}`:                  "not an integer from 1",
		`{"id":"1","result":{}}`:                  "not an integer from 1",
		`{"id":9007199254740992,"result":{}}`:     "not an integer from 1",
		`{"id":1}`:                                "neither a result nor an error",
		`{"id":1,"result":null}`:                  "neither a result nor an error",
		`{"id":1,"result":{},"error":{}}`:         "both a result and an error",
		`{"id":1,"result":"applied"}`:             "not a JSON object",
		`{"id":1,"error":"boom"}`:                 "not an object with a string class",
		`{"id":1,"error":{"class":7}}`:            "not an object with a string class",
		`{"id":1,"error":{"class":"fatal"}}`:      `unknown error class "fatal"`,
		`{"id":1,"error":{"message":"no class"}}`: `unknown error class ""`,
		"{\"id\":1,\"result\":{}}" + strings.Repeat(" ", MaxAnswerBytes): "over the",
	} {
		_, err := DecodeResponse([]byte(line))
		if !errors.Is(err, ErrViolation) || !strings.Contains(err.Error(), want) {
			t.Errorf("%.60q: %v; want a violation saying %q", line, err, want)
		}
	}
}

func TestDecodeHelloChecksTheDeclarations(t *testing.T) {
	h, err := DecodeHello(json.RawMessage(`{"protocol":1,"implementation":{"name":"x","version":"2"},"declares":{"conflict_policy":"reject","redelivery_window_s":1.5,"accepts_clock":true}}`), Versions)
	if err != nil {
		t.Fatal(err)
	}
	want := adapters.Declaration{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: 1500 * time.Millisecond, AcceptsClock: true}
	if h.Declares != want || h.MaxInFlight != 1 || h.Implementation.String() != "x 2" {
		t.Errorf("hello %+v, declaration %+v", h, h.Declares)
	}
	for raw, want := range map[string]string{
		`{"protocol":2,"implementation":{"name":"x"}}`:                                                                 "chose protocol version 2",
		`{"protocol":1,"implementation":{}}`:                                                                           "names no implementation",
		`{"protocol":1,"implementation":{"name":"x"},"declares":{"conflict_policy":"ignore"}}`:                         `unknown conflict_policy "ignore"`,
		`{"protocol":1,"implementation":{"name":"x"},"declares":{"redelivery_window_s":-1}}`:                           "redelivery_window_s -1",
		`{"protocol":1,"implementation":{"name":"x"},"declares":{"redelivery_window_s":1e300}}`:                        "redelivery_window_s 1e+300",
		`{"protocol":1,"implementation":{"name":"x"},"max_in_flight":1025}`:                                            "max_in_flight 1025",
		`{"protocol":1,"implementation":{"name":"x"},"max_in_flight":-3}`:                                              "max_in_flight -3",
		`{"protocol":"1","implementation":{"name":"x"}}`:                                                               "hello result is malformed",
		`{"protocol":1,"implementation":{"name":"x"},"declares":{"external_effects":"email"}}`:                         `unknown external_effects "email"`,
		`{"protocol":1,"implementation":{"name":"x"},"declares":{"external_effects":"Outbox"}}`:                        `unknown external_effects "Outbox"`,
		`{"protocol":1,"implementation":{"name":"x"},"declares":{"external_effects":1}}`:                               "hello result is malformed",
		`{"protocol":1,"implementation":{"name":"x"},"declares":{"max_send_delay_s":3}}`:                               "max_send_delay_s 3 is declared without external_effects",
		`{"protocol":1,"implementation":{"name":"x"},"declares":{"external_effects":"outbox","max_send_delay_s":-1}}`:  "max_send_delay_s -1",
		`{"protocol":1,"implementation":{"name":"x"},"declares":{"external_effects":"outbox","max_send_delay_s":4e9}}`: "max_send_delay_s 4e+09 is not between 0 and",
	} {
		if _, err := DecodeHello(json.RawMessage(raw), Versions); !errors.Is(err, ErrViolation) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want a violation saying %q", raw, err, want)
		}
	}
}

// TestDecodeHelloReadsExternalEffects: each defined value of
// declares.external_effects is read, and an absent or empty one declares
// none.
func TestDecodeHelloReadsExternalEffects(t *testing.T) {
	for value, want := range map[string]adapters.ExternalEffects{
		`,"external_effects":"outbox"`:                  adapters.Outbox,
		`,"external_effects":"destination-idempotency"`: adapters.DestinationIdempotency,
		`,"external_effects":""`:                        adapters.NoExternalEffects,
		`,"external_effects":null`:                      adapters.NoExternalEffects,
		``:                                              adapters.NoExternalEffects,
	} {
		raw := `{"protocol":1,"implementation":{"name":"x"},"declares":{"conflict_policy":"reject"` + value + `}}`
		h, err := DecodeHello(json.RawMessage(raw), Versions)
		if err != nil || h.Declares.ExternalEffects != want {
			t.Errorf("%s: external effects %q, %v; want %q", raw, h.Declares.ExternalEffects, err, want)
		}
	}
}

// TestDecodeHelloReadsTheSendDelay: declares.max_send_delay_s is read in
// seconds beside external_effects, and absent declares none.
func TestDecodeHelloReadsTheSendDelay(t *testing.T) {
	for value, want := range map[string]time.Duration{
		`,"max_send_delay_s":3`:    3 * time.Second,
		`,"max_send_delay_s":0.25`: 250 * time.Millisecond,
		`,"max_send_delay_s":0`:    0,
		``:                         0,
	} {
		raw := `{"protocol":1,"implementation":{"name":"x"},"declares":{"external_effects":"outbox"` + value + `}}`
		h, err := DecodeHello(json.RawMessage(raw), Versions)
		if err != nil || h.Declares.MaxSendDelay != want || h.Declares.ExternalEffects != adapters.Outbox {
			t.Errorf("%s: declaration %+v, %v; want a send delay of %s", raw, h.Declares, err, want)
		}
	}
}

// TestSetupCarriesTheDestination: setup's destination is sent when the play
// has one and left out when it has none, as docs/protocol.md says.
func TestSetupCarriesTheDestination(t *testing.T) {
	for _, tc := range []struct{ destination, want, unwanted string }{
		{"http://127.0.0.1:4242", `"destination":"http://127.0.0.1:4242"`, ""},
		{"", "", `"destination"`},
	} {
		line, err := EncodeRequest(2, MethodSetup, SetupParams{Instance: 1, DSN: "postgres://x", Schema: "s", Destination: tc.destination})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(line), tc.want) || (tc.unwanted != "" && strings.Contains(string(line), tc.unwanted)) {
			t.Errorf("setup with destination %q: %s", tc.destination, line)
		}
		req, err := DecodeRequest(bytes.TrimSuffix(line, []byte("\n")))
		if err != nil {
			t.Fatal(err)
		}
		var got SetupParams
		if err := json.Unmarshal(req.Params, &got); err != nil || got.Destination != tc.destination {
			t.Errorf("setup decoded destination %q, %v; want %q", got.Destination, err, tc.destination)
		}
	}
}

// TestSetupCarriesTheConnection: setup's connection is spelled as
// docs/protocol.md shows it, ports as numbers, and decodes back.
func TestSetupCarriesTheConnection(t *testing.T) {
	conn := Connection{
		Hosts: []string{"127.0.0.1", "127.0.0.1"}, Ports: []int{41001, 41002},
		User: "postgres", Password: "p@ss w", Database: "postgres",
		Parameters: map[string]string{"sslmode": "disable", "target_session_attrs": "read-write"},
	}
	line, err := EncodeRequest(2, MethodSetup, SetupParams{Instance: 1, DSN: "postgres://x", Connection: conn, Schema: "s"})
	if err != nil {
		t.Fatal(err)
	}
	want := `"connection":{"hosts":["127.0.0.1","127.0.0.1"],"ports":[41001,41002],"user":"postgres","password":"p@ss w","database":"postgres",` +
		`"parameters":{"sslmode":"disable","target_session_attrs":"read-write"}}`
	if !strings.Contains(string(line), want) {
		t.Errorf("setup is %s; want it to hold %s", line, want)
	}
	req, err := DecodeRequest(bytes.TrimSuffix(line, []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	var got SetupParams
	if err := json.Unmarshal(req.Params, &got); err != nil || !reflect.DeepEqual(got.Connection, conn) {
		t.Errorf("setup decoded connection %+v, %v; want %+v", got.Connection, err, conn)
	}
}

// TestDrainRequestAndAnswers: drain is sent with empty params; its answer
// is an empty result, or the error class unsupported from a child that
// does not implement it.
func TestDrainRequestAndAnswers(t *testing.T) {
	line, err := EncodeRequest(5, MethodDrain, nil)
	if err != nil || string(line) != `{"id":5,"method":"drain","params":{}}`+"\n" {
		t.Errorf("drain request %q, %v", line, err)
	}
	if resp, err := DecodeResponse([]byte(`{"id":5,"result":{}}`)); err != nil || string(resp.Result) != `{}` {
		t.Errorf("drained: %+v, %v", resp, err)
	}
	resp, err := DecodeResponse([]byte(`{"id":5,"error":{"class":"unsupported","message":"unknown method drain"}}`))
	if err != nil || resp.Error == nil || resp.Error.Class != Unsupported {
		t.Errorf("drain unsupported: %+v, %v", resp, err)
	}
}

func TestDecodeOutcomeAndPurge(t *testing.T) {
	for raw, want := range map[string]adapters.Outcome{
		`{"outcome":"applied"}`: adapters.Applied, `{"outcome":"duplicate"}`: adapters.Duplicate, `{"outcome":"rejected"}`: adapters.Rejected,
	} {
		if got, err := DecodeOutcome(json.RawMessage(raw)); err != nil || got != want {
			t.Errorf("%s: %v, %v", raw, got, err)
		}
		if OutcomeName(want) == "" {
			t.Errorf("no wire name for %v", want)
		}
	}
	for _, raw := range []string{`{"outcome":"Applied"}`, `{}`, `{"outcome":1}`} {
		if _, err := DecodeOutcome(json.RawMessage(raw)); !errors.Is(err, ErrViolation) {
			t.Errorf("%s: %v, want a violation", raw, err)
		}
	}
	if n, err := DecodePurge(json.RawMessage(`{"removed":0}`)); err != nil || n != 0 {
		t.Errorf("removed 0: %d, %v", n, err)
	}
	for _, raw := range []string{`{}`, `{"removed":-1}`, `{"removed":"3"}`, `{"removed":1.5}`} {
		if _, err := DecodePurge(json.RawMessage(raw)); !errors.Is(err, ErrViolation) {
			t.Errorf("%s: %v, want a violation", raw, err)
		}
	}
}

func TestRequestsRoundTrip(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 123456000, time.UTC)
	sent := DeliverParams{Namespace: []byte("ns\x00\xff"), EventID: []byte("id"), Payload: []byte{}, Attempt: 3, EffectArgs: []any{[]byte("ns\x00\xff"), []byte("id"), "abc", int32(3)}, Now: &now}
	line, err := EncodeRequest(7, MethodDeliver, sent)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(line, []byte("\n")) || bytes.Count(line, []byte("\n")) != 1 {
		t.Fatalf("not one line: %q", line)
	}
	req, err := DecodeRequest(bytes.TrimSuffix(line, []byte("\n")))
	if err != nil || req.ID != 7 || req.Method != MethodDeliver {
		t.Fatalf("decoded %+v, %v", req, err)
	}
	var got DeliverParams
	if err := json.Unmarshal(req.Params, &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Namespace, sent.Namespace) || !got.Now.Equal(now) || got.Attempt != 3 || got.EffectArgs[0] != "bnMA/w==" || got.EffectArgs[3] != 3.0 {
		t.Errorf("round trip: %+v", got)
	}
	if !strings.Contains(string(line), `"namespace":"bnMA/w=="`) {
		t.Errorf("the namespace is not standard base64: %s", line)
	}
}

func TestLineReader(t *testing.T) {
	r := NewLineReader(strings.NewReader("a\n\nbcd\n"), 3)
	for _, want := range []string{"a", "", "bcd"} {
		line, err := r.Next()
		if err != nil || string(line) != want {
			t.Fatalf("line %q, %v; want %q", line, err, want)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("at the end: %v, want io.EOF", err)
	}
	if _, err := NewLineReader(strings.NewReader("abcd\n"), 3).Next(); !errors.Is(err, errLineTooLong) {
		t.Errorf("a 4-byte line with a limit of 3: %v", err)
	}
	r = NewLineReader(strings.NewReader("ok\npartial"), 10)
	_, _ = r.Next()
	if _, err := r.Next(); !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), `"partial"`) {
		t.Errorf("a stream ending inside a line: %v", err)
	}
	long := strings.Repeat("x", 200<<10) // longer than the reader's buffer
	if line, err := NewLineReader(strings.NewReader(long+"\n"), len(long)).Next(); err != nil || len(line) != len(long) {
		t.Errorf("a %d-byte line: %d bytes, %v", len(long), len(line), err)
	}
}
