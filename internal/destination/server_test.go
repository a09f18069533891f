package destination

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/external"
)

// start starts a destination that the test closes at its end.
func start(t *testing.T) *Server {
	t.Helper()
	s, err := Start(t.Context(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") {
		t.Fatalf("URL %q is not on 127.0.0.1", s.URL())
	}
	return s
}

// wire is the body an implementation sends for ev.
func wire(ev adapters.Event) string {
	b, err := json.Marshal(external.NewRequest(ev))
	if err != nil {
		panic(err)
	}
	return string(b)
}

type reply struct {
	status   int
	replayed bool
	body     string
}

// post sends one request; keys are the Idempotency-Key values (none, one
// or more).
func post(t *testing.T, s *Server, body string, keys ...string) (reply, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL()+"/effects", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		req.Header.Add("Idempotency-Key", k)
	}
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, replayed: resp.Header.Get(ReplayedHeader) == "true", body: string(b)}, nil
}

// mustPost is post for a request that must get an answer.
func mustPost(t *testing.T, s *Server, body string, keys ...string) reply {
	t.Helper()
	r, err := post(t, s, body, keys...)
	if err != nil {
		t.Fatalf("POST %s: %v", body, err)
	}
	return r
}

func effectOf(t *testing.T, r reply) int {
	t.Helper()
	var v struct {
		Effect *int `json:"effect"`
	}
	if err := json.Unmarshal([]byte(r.body), &v); err != nil || v.Effect == nil {
		t.Fatalf("answer body %q is not {\"effect\": n}: %v", r.body, err)
	}
	return *v.Effect
}

func fired(t *testing.T, f *Fault) int64 {
	t.Helper()
	n, err := f.Fired(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var ev1 = adapters.Event{Namespace: "orders", ID: "42", Payload: []byte(`{"amount":10}`)}

func TestFirstRequestIsProcessedAndRepeatsReplay(t *testing.T) {
	s := start(t)
	first := mustPost(t, s, wire(ev1), "k1")
	if first.status != http.StatusCreated || first.replayed || effectOf(t, first) != 1 {
		t.Fatalf("first request: got %+v, want 201 {\"effect\": 1} not replayed", first)
	}
	// The same request, spelled differently: compared decoded.
	ns := base64.StdEncoding.EncodeToString([]byte(ev1.Namespace))
	id := base64.StdEncoding.EncodeToString([]byte(ev1.ID))
	respelled := fmt.Sprintf(` { "payload_digest": %q, "id": %q, "namespace": %q } `, adapters.PayloadDigest(ev1.Payload), id, ns)
	again := mustPost(t, s, respelled, "k1")
	if again.status != first.status || again.body != first.body || !again.replayed {
		t.Fatalf("repeat: got %+v, want the first answer %+v replayed", again, first)
	}
	if n := s.Processed(ev1); n != 1 {
		t.Fatalf("Processed = %d after a first request and a replay, want 1", n)
	}
	// A second key for the same event is processed again: the count is the
	// destination's, per identity.
	other := mustPost(t, s, wire(ev1), "k2")
	if other.status != http.StatusCreated || other.replayed || effectOf(t, other) != 2 {
		t.Fatalf("new key: got %+v, want 201 {\"effect\": 2}", other)
	}
	recs := s.RequestsFor(ev1)
	if len(recs) != 3 {
		t.Fatalf("RequestsFor: %d records, want 3", len(recs))
	}
	want := []struct {
		attempt   int
		key       string
		processed bool
		replayed  bool
		effect    int
	}{{1, "k1", true, false, 1}, {2, "k1", false, true, 0}, {3, "k2", true, false, 2}}
	for i, w := range want {
		r := recs[i]
		if r.Attempt != w.attempt || r.Key != w.key || r.Processed != w.processed || r.Replayed != w.replayed ||
			r.Effect != w.effect || r.Outcome != Answered || r.Status != http.StatusCreated || !r.Valid ||
			r.Identity != IdentityOf(ev1) || r.PayloadDigest != adapters.PayloadDigest(ev1.Payload) {
			t.Errorf("record %d = %+v, want %+v", i, r, w)
		}
	}
	if got := s.ProcessedAll(); len(got) != 1 || got[IdentityOf(ev1)] != 2 {
		t.Errorf("ProcessedAll = %v, want only %v: 2", got, IdentityOf(ev1))
	}
}

func TestSameKeyAnotherRequestIs422(t *testing.T) {
	s := start(t)
	mustPost(t, s, wire(ev1), "k")
	otherPayload := ev1
	otherPayload.Payload = []byte(`{"amount":11}`)
	otherEvent := adapters.Event{Namespace: "orders", ID: "43", Payload: ev1.Payload}
	for _, ev := range []adapters.Event{otherPayload, otherEvent} {
		r := mustPost(t, s, wire(ev), "k")
		if r.status != http.StatusUnprocessableEntity || r.replayed {
			t.Errorf("same key, other request %s: got %+v, want 422", ev, r)
		}
	}
	if n := s.Processed(ev1); n != 1 {
		t.Errorf("Processed(%s) = %d, want 1", ev1, n)
	}
	if n := s.Processed(otherEvent); n != 0 {
		t.Errorf("Processed(%s) = %d, want 0", otherEvent, n)
	}
}

func TestBadRequestsAre400(t *testing.T) {
	s := start(t)
	good := wire(ev1)
	digest := adapters.PayloadDigest(ev1.Payload)
	cases := []struct {
		name, body string
		keys       []string
		why        string
	}{
		{"no key", good, nil, "Idempotency-Key"},
		{"empty key", good, []string{""}, "Idempotency-Key"},
		{"two keys", good, []string{"a", "b"}, "Idempotency-Key"},
		{"long key", good, []string{strings.Repeat("k", 256)}, "Idempotency-Key"},
		{"not JSON", `{"namespace":`, []string{"k"}, "JSON"},
		{"not base64", fmt.Sprintf(`{"namespace":"b3Jk","id":"4*2","payload_digest":%q}`, digest), []string{"k"}, `"id" is not standard padded base64`},
		{"unpadded", fmt.Sprintf(`{"namespace":"b3JkZXJz","id":"NDI","payload_digest":%q}`, digest), []string{"k"}, `"id" is not standard padded base64`},
		{"no namespace", fmt.Sprintf(`{"id":"NDI=","payload_digest":%q}`, digest), []string{"k"}, `lacks "namespace"`},
		{"no id", fmt.Sprintf(`{"namespace":"","payload_digest":%q}`, digest), []string{"k"}, `lacks "id"`},
		{"no digest", `{"namespace":"","id":"NDI="}`, []string{"k"}, `lacks "payload_digest"`},
		{"empty id", fmt.Sprintf(`{"namespace":"","id":"","payload_digest":%q}`, digest), []string{"k"}, `"id" is empty`},
		{"bad digest", `{"namespace":"","id":"NDI=","payload_digest":"ABC"}`, []string{"k"}, "payload_digest"},
		{"unknown field", fmt.Sprintf(`{"namespace":"","id":"NDI=","payload_digest":%q,"amount":1}`, digest), []string{"k"}, "amount"},
		{"trailing data", good + `{}`, []string{"k"}, "after the JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := mustPost(t, s, c.body, c.keys...)
			var v struct{ Error string }
			if err := json.Unmarshal([]byte(r.body), &v); err != nil {
				t.Fatalf("error body %q: %v", r.body, err)
			}
			if r.status != http.StatusBadRequest || !strings.Contains(v.Error, c.why) {
				t.Fatalf("got %d %q, want 400 saying %q", r.status, v.Error, c.why)
			}
		})
	}
	if got := s.ProcessedAll(); len(got) != 0 {
		t.Errorf("bad requests processed: %v", got)
	}
	for _, r := range s.Requests() {
		if r.Status != http.StatusBadRequest || r.Processed || r.Reason == "" {
			t.Errorf("record %+v: want a 400 with its reason, not processed", r)
		}
	}
	// A request without a key leaves no trace in the idempotency layer.
	if r := mustPost(t, s, good, "k"); r.status != http.StatusCreated || r.replayed {
		t.Errorf("first good request after the bad ones: %+v, want 201", r)
	}
}

func TestOtherPathsAndMethods(t *testing.T) {
	s := start(t)
	resp, err := http.Get(s.URL() + "/effects")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodPost {
		t.Errorf("GET /effects: %d Allow %q, want 405 Allow POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
	resp, err = http.Post(s.URL()+"/effect", "application/json", strings.NewReader(wire(ev1)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /effect: %d, want 404", resp.StatusCode)
	}
}

func TestIdentitiesAreBytes(t *testing.T) {
	s := start(t)
	// Two ids that are not UTF-8 and that a JSON string would both turn
	// into U+FFFD.
	a := adapters.Event{Namespace: "n\xff", ID: "\xff", Payload: []byte("p")}
	b := adapters.Event{Namespace: "n\xff", ID: "\xfe", Payload: []byte("p")}
	for _, ev := range []adapters.Event{a, b} {
		if r := mustPost(t, s, wire(ev), "key-"+fmt.Sprintf("%x", ev.ID)); r.status != http.StatusCreated || effectOf(t, r) != 1 {
			t.Fatalf("%s: %+v, want 201 {\"effect\": 1}", ev, r)
		}
	}
	if s.Processed(a) != 1 || s.Processed(b) != 1 {
		t.Errorf("Processed: %d and %d, want 1 each", s.Processed(a), s.Processed(b))
	}
	if recs := s.RequestsFor(a); len(recs) != 1 || recs[0].Identity.ID != "\xff" {
		t.Errorf("RequestsFor(%s) = %+v", a, recs)
	}
}

func TestFailAnswersWithoutProcessing(t *testing.T) {
	s := start(t)
	f503, err := s.Fail(ev1, 1, 503)
	if err != nil {
		t.Fatal(err)
	}
	f500, err := s.Fail(ev1, 2, 500)
	if err != nil {
		t.Fatal(err)
	}
	if f503.Kind() != "dest:status-503" || f500.Kind() != "dest:status-500" {
		t.Errorf("kinds %q, %q", f503.Kind(), f500.Kind())
	}
	if r := mustPost(t, s, wire(ev1), "k"); r.status != 503 {
		t.Fatalf("attempt 1: %+v, want 503", r)
	}
	if r := mustPost(t, s, wire(ev1), "k"); r.status != 500 {
		t.Fatalf("attempt 2: %+v, want 500", r)
	}
	if n := s.Processed(ev1); n != 0 {
		t.Fatalf("Processed = %d after two failures, want 0", n)
	}
	// The key was not taken: the third attempt is the first processing.
	if r := mustPost(t, s, wire(ev1), "k"); r.status != http.StatusCreated || r.replayed || effectOf(t, r) != 1 {
		t.Fatalf("attempt 3: %+v, want 201 {\"effect\": 1} not replayed", r)
	}
	if fired(t, f503) != 1 || fired(t, f500) != 1 {
		t.Errorf("fired %d and %d, want 1 each", fired(t, f503), fired(t, f500))
	}
	if recs := s.RequestsFor(ev1); recs[0].Fault != "dest:status-503" || recs[1].Fault != "dest:status-500" || recs[2].Fault != "" {
		t.Errorf("records' faults: %q %q %q", recs[0].Fault, recs[1].Fault, recs[2].Fault)
	}
}

func TestPlanningErrors(t *testing.T) {
	s := start(t)
	if _, err := s.Fail(ev1, 1, 404); err == nil {
		t.Error("Fail with 404: no error")
	}
	if _, err := s.Hold(ev1, 0); err == nil {
		t.Error("Hold on attempt 0: no error")
	}
	if _, err := s.Slow(ev1, 1, 0); err == nil {
		t.Error("Slow of 0: no error")
	}
	if _, err := s.Hold(ev1, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DropAfterProcess(ev1, 1); err == nil {
		t.Error("two faults on one attempt: no error")
	}
}

func TestDropAfterProcessIsAmbiguous(t *testing.T) {
	s := start(t)
	f, err := s.DropAfterProcess(ev1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if f.Kind() != "dest:drop-after-process" {
		t.Errorf("kind %q", f.Kind())
	}
	if r, err := post(t, s, wire(ev1), "k"); err == nil {
		t.Fatalf("attempt 1 got an answer %+v, want a transport error", r)
	}
	if n := s.Processed(ev1); n != 1 {
		t.Fatalf("Processed = %d after a dropped answer, want 1", n)
	}
	if fired(t, f) != 1 {
		t.Errorf("fired %d, want 1", fired(t, f))
	}
	r := mustPost(t, s, wire(ev1), "k")
	if r.status != http.StatusCreated || !r.replayed || effectOf(t, r) != 1 {
		t.Fatalf("retry with the key: %+v, want 201 {\"effect\": 1} replayed", r)
	}
	if n := s.Processed(ev1); n != 1 {
		t.Fatalf("Processed = %d after the retry, want 1", n)
	}
	recs := s.RequestsFor(ev1)
	if recs[0].Outcome != Dropped || !recs[0].Processed || recs[0].Status != 0 {
		t.Errorf("record of the dropped request: %+v", recs[0])
	}
}

func TestSlowHoldsTheKey(t *testing.T) {
	s := start(t)
	f, err := s.Slow(ev1, 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	firstErr := make(chan error, 1)
	go func() {
		_, err := post(t, s, wire(ev1), "k")
		firstErr <- err
	}()
	<-f.Arrived()
	if r := mustPost(t, s, wire(ev1), "k"); r.status != http.StatusConflict {
		t.Fatalf("same key while the first is slow: %+v, want 409", r)
	}
	if n := s.Processed(ev1); n != 1 {
		t.Fatalf("Processed = %d, want 1: Slow processes first", n)
	}
	// Close drops the slow request without waiting an hour.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-firstErr; err == nil {
		t.Error("the slow request got an answer after Close")
	}
	recs := s.RequestsFor(ev1)
	if recs[0].Outcome != Dropped || recs[1].Status != http.StatusConflict || fired(t, f) != 1 {
		t.Errorf("records %+v, fired %d", recs, fired(t, f))
	}
}

func TestSlowAnswersLate(t *testing.T) {
	s := start(t)
	const d = 50 * time.Millisecond
	f, err := s.Slow(ev1, 1, d)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	r := mustPost(t, s, wire(ev1), "k")
	if r.status != http.StatusCreated || effectOf(t, r) != 1 {
		t.Fatalf("slow request: %+v, want 201", r)
	}
	if took := time.Since(began); took < d {
		t.Errorf("answered after %v, before the delay of %v", took, d)
	}
	if fired(t, f) != 1 || f.Kind() != "dest:slow" {
		t.Errorf("fired %d kind %q", fired(t, f), f.Kind())
	}
	// The key is done: a repeat replays.
	if r := mustPost(t, s, wire(ev1), "k"); !r.replayed {
		t.Errorf("repeat after the slow answer: %+v, want a replay", r)
	}
}

func TestHoldDropsUnprocessed(t *testing.T) {
	s := start(t)
	f, err := s.Hold(ev1, 1)
	if err != nil {
		t.Fatal(err)
	}
	heldErr := make(chan error, 1)
	go func() {
		_, err := post(t, s, wire(ev1), "k")
		heldErr <- err
	}()
	<-f.Arrived()
	if fired(t, f) != 1 || f.Kind() != "dest:hold" {
		t.Errorf("fired %d kind %q", fired(t, f), f.Kind())
	}
	recs := s.RequestsFor(ev1)
	if len(recs) != 1 || recs[0].Outcome != Pending {
		t.Fatalf("while held: %+v, want one pending record", recs)
	}
	f.Release()
	if err := <-heldErr; err == nil {
		t.Fatal("the held request got an answer")
	}
	if n := s.Processed(ev1); n != 0 {
		t.Fatalf("Processed = %d after a hold, want 0", n)
	}
	// Nothing took the key.
	if r := mustPost(t, s, wire(ev1), "k"); r.status != http.StatusCreated || r.replayed || effectOf(t, r) != 1 {
		t.Fatalf("after the hold: %+v, want 201 {\"effect\": 1} not replayed", r)
	}
	if recs := s.RequestsFor(ev1); recs[0].Outcome != Dropped || recs[0].Processed {
		t.Errorf("record of the held request: %+v", recs[0])
	}
}

func TestDownRefusesUntilUp(t *testing.T) {
	s := start(t)
	url := s.URL()
	f, err := s.Down()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Down(); !errors.Is(err, ErrDown) {
		t.Errorf("Down twice: %v, want ErrDown", err)
	}
	for i := range 3 {
		if r, err := post(t, s, wire(ev1), "k"); err == nil {
			t.Fatalf("request %d while down got an answer %+v", i, r)
		}
	}
	if fired(t, f) != 3 || f.Kind() != "dest:down" {
		t.Errorf("fired %d kind %q, want 3 refusals of dest:down", fired(t, f), f.Kind())
	}
	if n := s.Processed(ev1); n != 0 {
		t.Fatalf("Processed = %d while down", n)
	}
	s.Up()
	if s.URL() != url {
		t.Errorf("URL changed from %s to %s", url, s.URL())
	}
	if r := mustPost(t, s, wire(ev1), "k"); r.status != http.StatusCreated || effectOf(t, r) != 1 {
		t.Fatalf("after Up: %+v, want 201", r)
	}
	if fired(t, f) != 3 {
		t.Errorf("fired %d after Up, want 3", fired(t, f))
	}
	recs := s.Requests()
	if len(recs) != 4 {
		t.Fatalf("%d records, want 3 refused and 1 answered", len(recs))
	}
	for _, r := range recs[:3] {
		if r.Outcome != Refused || r.Fault != "dest:down" || r.Valid {
			t.Errorf("refused record %+v", r)
		}
	}
}

func TestConcurrentSameKeyIsProcessedOnce(t *testing.T) {
	s := start(t)
	const n = 32
	replies := make([]reply, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { replies[i], errs[i] = post(t, s, wire(ev1), "k") })
	}
	wg.Wait()
	firsts := 0
	for i, r := range replies {
		switch {
		case errs[i] != nil:
			t.Errorf("request %d: %v", i, errs[i])
		case r.status == http.StatusCreated && !r.replayed:
			firsts++
			fallthrough
		case r.status == http.StatusCreated:
			if effectOf(t, r) != 1 {
				t.Errorf("request %d: %+v, want {\"effect\": 1}", i, r)
			}
		case r.status != http.StatusConflict:
			t.Errorf("request %d: %+v, want 201 or 409", i, r)
		}
	}
	if firsts != 1 {
		t.Errorf("%d answers not replayed, want 1", firsts)
	}
	if got := s.Processed(ev1); got != 1 {
		t.Errorf("Processed = %d after %d concurrent requests with one key, want 1", got, n)
	}
}

func TestQuiet(t *testing.T) {
	s := start(t)
	const period = 20 * time.Millisecond
	if err := s.Quiet(t.Context(), period); err != nil {
		t.Fatalf("Quiet on an idle destination: %v", err)
	}
	mustPost(t, s, wire(ev1), "k")
	if err := s.Quiet(t.Context(), period); err != nil {
		t.Fatal(err)
	}
	if last := s.Requests()[0].At; time.Since(last) < period {
		t.Errorf("Quiet returned %v after the last request, before the period %v", time.Since(last), period)
	}
	// The period counts from the call: the request, a period old by
	// now, does not shorten the wait.
	called := time.Now()
	if err := s.Quiet(t.Context(), period); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(called); took < period {
		t.Errorf("Quiet returned %v after the call, %v after the last request; want a whole period %v after the call", took, time.Since(s.Requests()[0].At), period)
	}
	// A request in progress keeps the destination busy, however long.
	f, err := s.Hold(ev1, 2)
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() {
		_, err := post(t, s, wire(ev1), "k")
		held <- err
	}()
	<-f.Arrived()
	ctx, cancel := context.WithTimeout(t.Context(), 10*period)
	defer cancel()
	if err := s.Quiet(ctx, period); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Quiet with a held request: %v, want the context's deadline", err)
	}
	f.Release()
	<-held
	if err := s.Quiet(t.Context(), period); err != nil {
		t.Fatal(err)
	}
}

func TestCloseDropsHeldRequestsAndWaits(t *testing.T) {
	s, err := Start(t.Context(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.Hold(ev1, 1)
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() {
		_, err := post(t, s, wire(ev1), "k")
		held <- err
	}()
	<-f.Arrived()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Close returned once the held handler was done: its record is final.
	if recs := s.Requests(); len(recs) != 1 || recs[0].Outcome != Dropped {
		t.Errorf("records after Close: %+v", recs)
	}
	if err := <-held; err == nil {
		t.Error("held request answered")
	}
	if _, err := post(t, s, wire(ev1), "k"); err == nil {
		t.Error("request after Close answered")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestBodyRecordedAsReceived(t *testing.T) {
	s := start(t)
	body := wire(ev1)
	mustPost(t, s, body, "k")
	recs := s.Requests()
	if !bytes.Equal(recs[0].Body, []byte(body)) {
		t.Fatalf("recorded body %q, want %q", recs[0].Body, body)
	}
	recs[0].Body[0] = 'X'
	if s.Requests()[0].Body[0] == 'X' {
		t.Error("Requests shares the record's body")
	}
}

// The reference client, external.Send with external.Key, against the
// destination: a dropped answer is an error worth retrying, and the retry
// is acknowledged without a second processing.
func TestExternalSendAgainstTheDestination(t *testing.T) {
	s := start(t)
	if _, err := s.DropAfterProcess(ev1, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Fail(ev1, 2, 503); err != nil {
		t.Fatal(err)
	}
	key := external.Key(ev1)
	for attempt := 1; attempt <= 2; attempt++ {
		if err := external.Send(t.Context(), nil, s.URL(), key, ev1); err == nil {
			t.Fatalf("Send attempt %d: nil error, want a retryable one", attempt)
		}
	}
	if err := external.Send(t.Context(), nil, s.URL(), key, ev1); err != nil {
		t.Fatalf("Send attempt 3: %v", err)
	}
	other := ev1
	other.Payload = []byte("another payload")
	if err := external.Send(t.Context(), nil, s.URL(), key, other); !errors.Is(err, external.ErrConflict) {
		t.Fatalf("Send of another payload with the key: %v, want ErrConflict", err)
	}
	if n := s.Processed(ev1); n != 1 {
		t.Fatalf("Processed = %d, want 1", n)
	}
	for _, r := range s.RequestsFor(ev1) {
		if r.Key != key {
			t.Errorf("record %d has key %q, want %q", r.Seq, r.Key, key)
		}
	}
}

// After ForgetRequests the destination keeps its counts and keys but no
// more records: the ones made before stay, and numbering goes on.
func TestForgetRequestsKeepsCounts(t *testing.T) {
	s := start(t)
	mustPost(t, s, wire(ev1), "k1")
	s.ForgetRequests()
	again := mustPost(t, s, wire(ev1), "k1")
	mustPost(t, s, wire(ev1), "k2")
	if !again.replayed {
		t.Errorf("the key taken before ForgetRequests was forgotten: %+v", again)
	}
	if n := s.Processed(ev1); n != 2 {
		t.Errorf("Processed = %d, want 2", n)
	}
	if recs := s.Requests(); len(recs) != 1 || recs[0].Seq != 1 {
		t.Errorf("records after ForgetRequests: %+v, want only the first", recs)
	}
}
