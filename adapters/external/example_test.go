package external_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/external"
)

// An implementation that sends its effects through an HTTP stack of its
// own (a retrying client, a job queue that stores requests, a signing
// transport), rather than through Send, builds the request the
// destination takes from the contract's pieces: the path, the key header
// and the body.
func ExampleNewRequest() {
	ev := adapters.Event{Namespace: "orders", ID: "42", Payload: []byte(`{"total":10}`)}
	body, err := json.Marshal(external.NewRequest(ev))
	if err != nil {
		fmt.Println(err)
		return
	}
	destination := "http://127.0.0.1:8080" // adapters.Env.Destination
	req, err := http.NewRequest(http.MethodPost, destination+external.Path, bytes.NewReader(body))
	if err != nil {
		fmt.Println(err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	// The key comes from the identity, so every retry of this event
	// carries the same one.
	req.Header.Set(external.KeyHeader, external.Key(ev))

	fmt.Println(req.Method, req.URL.Path)
	var sent external.Request
	if err := json.Unmarshal(body, &sent); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sent.Namespace, sent.ID, sent.PayloadDigest == adapters.PayloadDigest(ev.Payload))
	// Output:
	// POST /effects
	// b3JkZXJz NDI= true
}

// A relay decides from Send's error what to do with an outbox row: delete
// it once the destination acknowledged the effect, retry it later with the
// same key on any other error (the answer may have been lost after the
// effect was made), and park it for a human on ErrConflict, which no retry
// fixes. Here a stand-in destination answers as the real one does when the
// key was already used with another body.
func ExampleSend() {
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "idempotency key reused with another request", http.StatusUnprocessableEntity)
	}))
	defer dest.Close()

	ev := adapters.Event{Namespace: "orders", ID: "42", Payload: []byte(`{"total":10}`)}
	err := external.Send(context.Background(), dest.Client(), dest.URL, external.Key(ev), ev)
	switch {
	case err == nil:
		fmt.Println("acknowledged: delete the row")
	case errors.Is(err, external.ErrConflict):
		fmt.Println("refused for good: park the row")
	default:
		fmt.Println("retry later, with the same key")
	}
	// Output:
	// refused for good: park the row
}
