package external_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/external"
)

// TestKeyIsTheIdentity: the key depends on the identity only, and
// identities that differ anywhere, including by where the namespace ends,
// get different keys.
func TestKeyIsTheIdentity(t *testing.T) {
	ev := adapters.Event{Namespace: "orders", ID: "42", Payload: []byte("a")}
	again := ev
	again.Payload = []byte("another payload")
	if external.Key(ev) != external.Key(again) {
		t.Errorf("the key changed with the payload: %s, %s", external.Key(ev), external.Key(again))
	}
	seen := map[string]adapters.Event{}
	for _, e := range []adapters.Event{
		{Namespace: "orders", ID: "42"},
		{Namespace: "orders4", ID: "2"},
		{Namespace: "order", ID: "s42"},
		{Namespace: "", ID: "orders42"},
		{Namespace: "orders", ID: "42\xff"},
		{Namespace: "orders", ID: "42\xfe"},
		{Namespace: "Orders", ID: "42"},
	} {
		k := external.Key(e)
		if prev, ok := seen[k]; ok {
			t.Errorf("%s and %s share the key %s", prev, e, k)
		}
		seen[k] = e
	}
}

// TestRequestKeepsEveryByte: an identity that is not UTF-8 survives the
// JSON body.
func TestRequestKeepsEveryByte(t *testing.T) {
	ev := adapters.Event{Namespace: "n\xff\x00", ID: "i\xc3\x28", Payload: []byte("p")}
	data, err := json.Marshal(external.NewRequest(ev))
	if err != nil {
		t.Fatal(err)
	}
	var r external.Request
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	ns, nsErr := base64.StdEncoding.DecodeString(r.Namespace)
	id, idErr := base64.StdEncoding.DecodeString(r.ID)
	if nsErr != nil || idErr != nil || string(ns) != ev.Namespace || string(id) != ev.ID || r.PayloadDigest != adapters.PayloadDigest(ev.Payload) {
		t.Errorf("%s reads back as %q/%q digest %s (%v, %v)", data, ns, id, r.PayloadDigest, nsErr, idErr)
	}
}

// TestSendClassifiesAnswers: Send reports success for 2xx, ErrConflict for
// 422, and an error to retry for anything else; it sends the key and the
// body the contract names.
func TestSendClassifiesAnswers(t *testing.T) {
	ev := adapters.Event{Namespace: "orders", ID: "42", Payload: []byte("a")}
	status := make(chan int, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body external.Request
		switch {
		case r.Method != http.MethodPost || r.URL.Path != external.Path:
			http.Error(w, "wrong method or path "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		case r.Header.Get(external.KeyHeader) != external.Key(ev):
			http.Error(w, "wrong key "+r.Header.Get(external.KeyHeader), http.StatusBadRequest)
		case json.NewDecoder(r.Body).Decode(&body) != nil || body != external.NewRequest(ev):
			http.Error(w, "wrong body", http.StatusBadRequest)
		default:
			w.WriteHeader(<-status)
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		status   int
		ok       bool
		conflict bool
	}{
		{http.StatusCreated, true, false},
		{http.StatusOK, true, false},
		{http.StatusUnprocessableEntity, false, true},
		{http.StatusConflict, false, false},
		{http.StatusServiceUnavailable, false, false},
	} {
		status <- tc.status
		err := external.Send(context.Background(), srv.Client(), srv.URL+"/", external.Key(ev), ev)
		if (err == nil) != tc.ok || errors.Is(err, external.ErrConflict) != tc.conflict {
			t.Errorf("answer %d: Send returned %v", tc.status, err)
		}
		if err != nil && !strings.Contains(err.Error(), "orders/42") {
			t.Errorf("answer %d: the error does not name the event: %v", tc.status, err)
		}
	}
	// A destination that is not there is an error to retry.
	srv.Close()
	if err := external.Send(context.Background(), nil, srv.URL, external.Key(ev), ev); err == nil || errors.Is(err, external.ErrConflict) {
		t.Errorf("a closed destination: Send returned %v", err)
	}
}
