package external_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

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
