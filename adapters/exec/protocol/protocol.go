// Package protocol is the wire format of harmless's exec protocol: the
// line-delimited JSON that harmless speaks with an implementation running as
// a child process, in any language.
//
// docs/protocol.md is the specification; this package is its Go codec, used
// by the harness (package adapters/exec) to encode requests and decode
// answers, and usable by Go programs that want to be certified as external
// processes, to decode requests and encode answers.
//
// The decoders are strict on purpose: an answer that does not follow the
// specification is a [ErrViolation], which the harness reports as a failure
// of the implementation. They never panic, whatever the input; a fuzz test
// holds them to that.
package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/harmless-dev/harmless/adapters"
)

// Version is the newest protocol version this package speaks.
const Version = 1

// Versions are the protocol versions this package speaks, offered in hello.
var Versions = []int{Version}

// Line limits, without the "\n". Requests carry events, and the bad-input
// fixture sends a 1 MiB id, which travels twice in base64, and a 16 MiB
// payload, which grows by a third in base64; answers are
// small.
const (
	// MaxRequestBytes is the longest request line the harness sends.
	MaxRequestBytes = 64 << 20
	// MaxAnswerBytes is the longest answer line an implementation may send.
	MaxAnswerBytes = 1 << 20
)

// maxID is the largest request id: ids must be exact in a JSON number read as
// an IEEE 754 double, as most languages read them.
const maxID = 1<<53 - 1

// maxInFlightLimit is the largest max_in_flight an implementation may declare.
const maxInFlightLimit = 1024

// maxWindow bounds a declared redelivery window, and a declared send
// delay (about 100 years), so that each converts to a time.Duration
// without overflow.
const maxWindow = 100 * 365 * 24 * time.Hour

// Methods of the protocol.
const (
	MethodHello   = "hello"
	MethodSetup   = "setup"
	MethodDeliver = "deliver"
	MethodPurge   = "purge"
	// MethodDrain has no params, and its result is the empty object, sent
	// once every external effect the child committed before the request
	// has been acknowledged by the destination. It is optional: a child
	// that does not implement it answers the error class [Unsupported].
	MethodDrain    = "drain"
	MethodShutdown = "shutdown"
)

// ErrViolation marks input that breaks the protocol.
var ErrViolation = errors.New("protocol violation")

func violation(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrViolation, fmt.Sprintf(format, args...))
}

// ErrorClass classifies an error answer. See docs/protocol.md.
type ErrorClass string

// The error classes.
const (
	// Transient means the delivery was not acknowledged and may be retried.
	Transient ErrorClass = "transient"
	// InvalidInput means the event itself is not acceptable.
	InvalidInput ErrorClass = "invalid_input"
	// PayloadConflict means the identity was claimed with another payload.
	PayloadConflict ErrorClass = "payload_conflict"
	// Unsupported means the method is not implemented.
	Unsupported ErrorClass = "unsupported"
)

// valid reports whether c is a defined class.
func (c ErrorClass) valid() bool {
	switch c {
	case Transient, InvalidInput, PayloadConflict, Unsupported:
		return true
	}
	return false
}

// Error is an error answer's body.
type Error struct {
	Class   ErrorClass `json:"class"`
	Message string     `json:"message,omitempty"`
}

// Error returns the class and the message.
func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Class)
	}
	return string(e.Class) + ": " + e.Message
}

// request is one request, as the harness sends it.
type request struct {
	ID     uint64 `json:"id"`
	Method string `json:"method"`
	Params any    `json:"params"`
}

// Response is one decoded answer: exactly one of Result and Error is set.
type Response struct {
	ID     uint64
	Result json.RawMessage
	Error  *Error
}

// EncodeRequest returns the line for a request, "\n" included.
func EncodeRequest(id uint64, method string, params any) ([]byte, error) {
	if params == nil {
		params = struct{}{}
	}
	return encodeLine(request{ID: id, Method: method, Params: params}, MaxRequestBytes)
}

// EncodeResult returns the line answering request id with result.
func EncodeResult(id uint64, result any) ([]byte, error) {
	if result == nil {
		result = struct{}{}
	}
	return encodeLine(struct {
		ID     uint64 `json:"id"`
		Result any    `json:"result"`
	}{id, result}, MaxAnswerBytes)
}

// EncodeError returns the line answering request id with an error.
func EncodeError(id uint64, class ErrorClass, message string) ([]byte, error) {
	return encodeLine(struct {
		ID    uint64 `json:"id"`
		Error Error  `json:"error"`
	}{id, Error{Class: class, Message: message}}, MaxAnswerBytes)
}

func encodeLine(v any, limit int) ([]byte, error) {
	line, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode message: %w", err)
	}
	if len(line) > limit {
		return nil, fmt.Errorf("encode message: %d bytes is over the %d-byte line limit", len(line), limit)
	}
	return append(line, '\n'), nil
}

// envelope is the raw shape of every message.
type envelope struct {
	ID     json.RawMessage `json:"id"`
	Method json.RawMessage `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

func decodeEnvelope(line []byte, limit int) (envelope, uint64, error) {
	var env envelope
	if len(line) > limit {
		return env, 0, violation("a line of %d bytes is over the %d-byte limit", len(line), limit)
	}
	if !isObject(line) {
		return env, 0, violation("not a JSON object: %s", excerpt(line))
	}
	if err := json.Unmarshal(line, &env); err != nil {
		return env, 0, violation("not valid JSON (%v): %s", err, excerpt(line))
	}
	id, err := decodeID(env.ID)
	if err != nil {
		return env, 0, err
	}
	return env, id, nil
}

// isObject reports whether line, after leading whitespace, starts an object.
func isObject(line []byte) bool {
	for _, b := range line {
		switch b {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return true
		default:
			return false
		}
	}
	return false
}

func decodeID(raw json.RawMessage) (uint64, error) {
	if !present(raw) {
		return 0, violation("the message has no id")
	}
	id, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil || id == 0 || id > maxID {
		return 0, violation("the id %s is not an integer from 1 to 2^53-1", excerpt(raw))
	}
	return id, nil
}

// present reports whether a field was given a value other than null.
func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// DecodeResponse decodes one answer line. Any departure from the
// specification is an error wrapping [ErrViolation].
func DecodeResponse(line []byte) (Response, error) {
	env, id, err := decodeEnvelope(line, MaxAnswerBytes)
	if err != nil {
		return Response{}, err
	}
	resp := Response{ID: id}
	switch hasResult, hasError := present(env.Result), present(env.Error); {
	case hasResult && hasError:
		return Response{}, violation("answer %d has both a result and an error", id)
	case hasResult:
		if !isObject(env.Result) {
			return Response{}, violation("the result of answer %d is not a JSON object: %s", id, excerpt(env.Result))
		}
		resp.Result = env.Result
	case hasError:
		var e Error
		if !isObject(env.Error) || json.Unmarshal(env.Error, &e) != nil {
			return Response{}, violation("the error of answer %d is not an object with a string class and message: %s", id, excerpt(env.Error))
		}
		if !e.Class.valid() {
			return Response{}, violation("answer %d has the unknown error class %q (known: %s, %s, %s, %s)", id, e.Class, Transient, InvalidInput, PayloadConflict, Unsupported)
		}
		resp.Error = &e
	default:
		return Response{}, violation("answer %d has neither a result nor an error", id)
	}
	return resp, nil
}

// IncomingRequest is one decoded request, as an implementation reads it.
type IncomingRequest struct {
	ID     uint64
	Method string
	Params json.RawMessage
}

// DecodeRequest decodes one request line, for Go implementations of the
// child side.
func DecodeRequest(line []byte) (IncomingRequest, error) {
	env, id, err := decodeEnvelope(line, MaxRequestBytes)
	if err != nil {
		return IncomingRequest{}, err
	}
	var method string
	if json.Unmarshal(env.Method, &method) != nil || method == "" {
		return IncomingRequest{}, violation("request %d has no method", id)
	}
	params := env.Params
	if !present(params) {
		params = json.RawMessage("{}")
	}
	if !isObject(params) {
		return IncomingRequest{}, violation("the params of request %d are not a JSON object: %s", id, excerpt(params))
	}
	return IncomingRequest{ID: id, Method: method, Params: params}, nil
}

// decodeResult decodes the result object of method into v.
func decodeResult(method string, raw json.RawMessage, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return violation("the %s result is malformed (%v): %s", method, err, excerpt(raw))
	}
	return nil
}

// excerpt quotes the start of a message for an error: at most 200 bytes.
func excerpt(b []byte) string {
	const shown = 200
	if len(b) > shown {
		return strconv.Quote(string(b[:shown])) + fmt.Sprintf("…(%d bytes)", len(b))
	}
	return strconv.Quote(string(b))
}

// HelloParams are the harness's hello.
type HelloParams struct {
	// Protocols are the versions the harness speaks.
	Protocols []int `json:"protocols"`
	// Harness is the harness's version.
	Harness string `json:"harness"`
}

// Implementation names the implementation behind a child process.
type Implementation struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}

// String returns "name version", or the name alone.
func (i Implementation) String() string {
	if i.Version == "" {
		return i.Name
	}
	return i.Name + " " + i.Version
}

// HelloResult is the implementation's answer to hello.
type HelloResult struct {
	Protocol       int            `json:"protocol"`
	Implementation Implementation `json:"implementation"`
	// Declares is what the implementation claims about itself, spelled
	// {"conflict_policy":"reject","redelivery_window_s":86400,"accepts_clock":true,"external_effects":"outbox","max_send_delay_s":3}
	// (see [adapters.Declaration.MarshalJSON]).
	Declares adapters.Declaration `json:"declares"`
	// MaxInFlight is how many requests one process handles at once; 0 in
	// the message means 1, and DecodeHello returns 1 then.
	MaxInFlight int `json:"max_in_flight,omitempty"`
}

// DecodeHello decodes and checks a hello result against the versions the
// harness offered.
func DecodeHello(raw json.RawMessage, offered []int) (HelloResult, error) {
	var h HelloResult
	if err := decodeResult(MethodHello, raw, &h); err != nil {
		return HelloResult{}, err
	}
	if !slices.Contains(offered, h.Protocol) {
		return HelloResult{}, violation("the implementation chose protocol version %d; the harness offered %v", h.Protocol, offered)
	}
	if h.Implementation.Name == "" {
		return HelloResult{}, violation("hello names no implementation (implementation.name is empty)")
	}
	switch h.Declares.ConflictPolicy {
	case adapters.NoConflictPolicy, adapters.RejectConflicts:
	default:
		return HelloResult{}, violation("unknown conflict_policy %q (known: %q, or \"\" for none)", h.Declares.ConflictPolicy, adapters.RejectConflicts)
	}
	if !h.Declares.ExternalEffects.Valid() {
		return HelloResult{}, violation("unknown external_effects %q (known: %q, %q, or absent for none)", h.Declares.ExternalEffects, adapters.Outbox, adapters.DestinationIdempotency)
	}
	// A negative window, or one too long for a time.Duration, does not
	// decode (see adapters.Declaration.UnmarshalJSON).
	if w := h.Declares.RedeliveryWindow; w > maxWindow {
		return HelloResult{}, violation("redelivery_window_s %v is not between 0 and %.0f", w.Seconds(), maxWindow.Seconds())
	}
	switch d := h.Declares.MaxSendDelay; {
	case d > maxWindow:
		return HelloResult{}, violation("max_send_delay_s %v is not between 0 and %.0f", d.Seconds(), maxWindow.Seconds())
	case d > 0 && h.Declares.ExternalEffects == adapters.NoExternalEffects:
		return HelloResult{}, violation("max_send_delay_s %v is declared without external_effects: it bounds how long a relay takes to send an external effect, so declare external_effects too, or leave it out", d.Seconds())
	}
	if h.MaxInFlight == 0 {
		h.MaxInFlight = 1
	}
	if h.MaxInFlight < 1 || h.MaxInFlight > maxInFlightLimit {
		return HelloResult{}, violation("max_in_flight %d is not between 1 and %d", h.MaxInFlight, maxInFlightLimit)
	}
	return h, nil
}

// EffectParam names one argument of the effect's statement and its
// PostgreSQL type.
type EffectParam struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// EffectSpec is the effect as setup describes it.
type EffectSpec struct {
	SQL    string        `json:"sql"`
	Params []EffectParam `json:"params"`
}

// SetupParams are setup's parameters.
type SetupParams struct {
	Instance int    `json:"instance"`
	DSN      string `json:"dsn"`
	// Connection is DSN in parts, for a driver that cannot read DSN.
	Connection Connection `json:"connection"`
	Schema     string     `json:"schema"`
	Effect     EffectSpec `json:"effect"`
	// Destination is the base URL (http://127.0.0.1:PORT) of the play's
	// external destination (see [adapters.Env.Destination]); absent when
	// the play has none.
	Destination string `json:"destination,omitempty"`
}

// Connection is setup's DSN in parts, read from its text as pgx and libpq
// read it, so that a driver that cannot read a libpq connection string
// (pgjdbc; node-postgres, which reads one host only) can be configured
// with the same connection. docs/protocol.md says which parts an
// implementation must keep, and why.
type Connection struct {
	// Hosts are the DSN's hosts, in its order: on a replicated formation
	// every node's, the primary's first. A host that starts with '/' is
	// a Unix-socket directory; "" (where the DSN names no host, which
	// harmless never sends) means the driver's default.
	Hosts []string `json:"hosts"`
	// Ports are the ports of Hosts, one each; 5432 where the DSN names
	// none.
	Ports []int `json:"ports"`
	// User, Password and Database are "" where the DSN names none (then
	// the driver's default applies: libpq's is the operating system's
	// user, and a database named as the user). Password is a secret.
	User     string `json:"user"`
	Password string `json:"password"`
	Database string `json:"database"`
	// Parameters are every other setting of the DSN by its libpq name,
	// sslmode, target_session_attrs and application_name among them.
	Parameters map[string]string `json:"parameters"`
}

// DeliverParams are deliver's parameters. Byte fields travel as standard
// base64, which is how encoding/json encodes []byte.
type DeliverParams struct {
	Namespace  []byte     `json:"namespace"`
	EventID    []byte     `json:"event_id"`
	Payload    []byte     `json:"payload"`
	Attempt    int        `json:"attempt"`
	EffectArgs []any      `json:"effect_args"`
	Now        *time.Time `json:"now,omitempty"`
}

// DeliverResult is deliver's result.
type DeliverResult struct {
	Outcome string `json:"outcome"`
}

// Outcome names on the wire.
const (
	outcomeApplied   = "applied"
	outcomeDuplicate = "duplicate"
	outcomeRejected  = "rejected"
)

// DecodeOutcome decodes a deliver result.
func DecodeOutcome(raw json.RawMessage) (adapters.Outcome, error) {
	var r DeliverResult
	if err := decodeResult(MethodDeliver, raw, &r); err != nil {
		return 0, err
	}
	switch r.Outcome {
	case outcomeApplied:
		return adapters.Applied, nil
	case outcomeDuplicate:
		return adapters.Duplicate, nil
	case outcomeRejected:
		return adapters.Rejected, nil
	}
	return 0, violation("unknown outcome %q (known: %s, %s, %s)", r.Outcome, outcomeApplied, outcomeDuplicate, outcomeRejected)
}

// OutcomeName is the wire name of o.
func OutcomeName(o adapters.Outcome) string {
	switch o {
	case adapters.Applied:
		return outcomeApplied
	case adapters.Duplicate:
		return outcomeDuplicate
	case adapters.Rejected:
		return outcomeRejected
	}
	return ""
}

// PurgeParams are purge's parameters.
type PurgeParams struct {
	Cutoff time.Time  `json:"cutoff"`
	Now    *time.Time `json:"now,omitempty"`
}

// PurgeResult is purge's result.
type PurgeResult struct {
	Removed *int64 `json:"removed"`
}

// DecodePurge decodes a purge result: how many markers were removed.
func DecodePurge(raw json.RawMessage) (int64, error) {
	var r PurgeResult
	if err := decodeResult(MethodPurge, raw, &r); err != nil {
		return 0, err
	}
	if r.Removed == nil || *r.Removed < 0 {
		return 0, violation("the purge result has no non-negative removed count: %s", excerpt(raw))
	}
	return *r.Removed, nil
}
