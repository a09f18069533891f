package adapters_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
)

// TestDeclarationJSON: a declaration is spelled as the exec protocol's
// hello and the certificate spell it, the window in seconds, and reads
// back the same.
func TestDeclarationJSON(t *testing.T) {
	for _, tc := range []struct {
		d    adapters.Declaration
		json string
	}{
		{adapters.Declaration{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: 24 * time.Hour, AcceptsClock: true},
			`{"conflict_policy":"reject","redelivery_window_s":86400,"accepts_clock":true}`},
		{adapters.Declaration{RedeliveryWindow: 1500 * time.Millisecond},
			`{"conflict_policy":"","redelivery_window_s":1.5,"accepts_clock":false}`},
		{adapters.Declaration{}, `{"conflict_policy":"","redelivery_window_s":0,"accepts_clock":false}`},
		{adapters.Declaration{ExternalEffects: adapters.Outbox},
			`{"conflict_policy":"","redelivery_window_s":0,"accepts_clock":false,"external_effects":"outbox"}`},
		{adapters.Declaration{ExternalEffects: adapters.Outbox, MaxSendDelay: 3 * time.Second},
			`{"conflict_policy":"","redelivery_window_s":0,"accepts_clock":false,"external_effects":"outbox","max_send_delay_s":3}`},
		{adapters.Declaration{ExternalEffects: adapters.DestinationIdempotency, MaxSendDelay: 250 * time.Millisecond},
			`{"conflict_policy":"","redelivery_window_s":0,"accepts_clock":false,"external_effects":"destination-idempotency","max_send_delay_s":0.25}`},
	} {
		data, err := json.Marshal(tc.d)
		if err != nil {
			t.Fatal(err)
		}
		if string(data) != tc.json {
			t.Errorf("%+v encodes as %s; want %s", tc.d, data, tc.json)
		}
		var back adapters.Declaration
		if err := json.Unmarshal(data, &back); err != nil || back != tc.d {
			t.Errorf("%s reads back as %+v (%v); want %+v", data, back, err, tc.d)
		}
	}

	// Absent fields are zero, unknown ones ignored, null changes nothing.
	var d adapters.Declaration
	if err := json.Unmarshal([]byte(`{"accepts_clock":true,"later":1}`), &d); err != nil || d != (adapters.Declaration{AcceptsClock: true}) {
		t.Errorf("a partial declaration reads as %+v (%v)", d, err)
	}
	if err := json.Unmarshal([]byte(`null`), &d); err != nil || d != (adapters.Declaration{AcceptsClock: true}) {
		t.Errorf("null changed the declaration to %+v (%v)", d, err)
	}

	// A window no duration stands for is an error that names it.
	for raw, want := range map[string]string{
		`{"redelivery_window_s":-1}`:    "redelivery_window_s -1 ",
		`{"redelivery_window_s":1e300}`: "redelivery_window_s 1e+300 ",
		`{"redelivery_window_s":9.3e9}`: "redelivery_window_s 9.3e+09 ",
		`{"redelivery_window_s":"1"}`:   "cannot unmarshal string",
		`{"max_send_delay_s":-0.5}`:     "max_send_delay_s -0.5 ",
		`{"max_send_delay_s":1e300}`:    "max_send_delay_s 1e+300 ",
		`{"max_send_delay_s":9.3e9}`:    "max_send_delay_s 9.3e+09 ",
		`{"max_send_delay_s":"3"}`:      "cannot unmarshal string",
	} {
		if err := json.Unmarshal([]byte(raw), &d); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error saying %q", raw, err, want)
		}
	}
}

// TestValidateChecksTheSendDelay: a send delay is a pace of external
// effects, so it needs them, and a negative one stands for nothing.
func TestValidateChecksTheSendDelay(t *testing.T) {
	adapter := func(d adapters.Declaration) adapters.Adapter {
		return adapters.Adapter{Name: "x", Declares: d, New: func(context.Context, adapters.Env) (adapters.Implementation, error) { return nil, nil }}
	}
	for _, d := range []adapters.Declaration{
		{ExternalEffects: adapters.Outbox, MaxSendDelay: 3 * time.Second},
		{ExternalEffects: adapters.DestinationIdempotency, MaxSendDelay: time.Millisecond},
		{ExternalEffects: adapters.Outbox},
		{},
	} {
		if err := adapter(d).Validate(); err != nil {
			t.Errorf("%+v: %v; want it valid", d, err)
		}
	}
	for _, tc := range []struct {
		d    adapters.Declaration
		want string
	}{
		{adapters.Declaration{MaxSendDelay: 3 * time.Second}, `adapter "x" declares a max send delay of 3s but no external effects`},
		{adapters.Declaration{ExternalEffects: adapters.Outbox, MaxSendDelay: -time.Second}, `adapter "x" declares a negative max send delay -1s`},
	} {
		if err := adapter(tc.d).Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want an error saying %q", tc.d, err, tc.want)
		}
	}
}
