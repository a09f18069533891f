package destination

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/external"
)

const (
	// ReplayedHeader is set to "true" on an answer replayed for a repeated
	// key, as Stripe and the IETF Idempotency-Key draft do.
	ReplayedHeader = "Idempotent-Replayed"
	// maxKeyLen bounds a key, as Stripe does.
	maxKeyLen = 255
	// maxBody bounds a body: identities have at most
	// 1024 bytes each (adapters.CheckIdentity), under 1.4 kB in base64.
	maxBody = 64 << 10
)

// Server is one destination. Its methods are safe for concurrent use.
type Server struct {
	logf   func(string, ...any)
	ln     *gate
	http   *http.Server
	url    string
	served chan struct{} // closed when Serve returned
	done   chan struct{} // closed by Close

	closeOnce sync.Once
	closeErr  error

	mu        sync.Mutex
	closed    bool
	records   []*Record
	seq       int  // records made, kept or not
	forget    bool // see ForgetRequests
	attempts  map[Identity]int
	processed map[Identity]int
	total     int // requests processed, over every identity
	keys      map[string]*entry
	planned   map[slot]*Fault
	outage    *Fault // non-nil while down
	inFlight  int
	last      time.Time     // last arrival or completion, for Quiet and Settle
	changed   chan struct{} // closed and replaced on every arrival and completion, and by Expect

	// For Settle: each identity's requests, when a connection was last
	// refused, the effects owed (with their commit times, zero when
	// unknown), how many of those are not yet acknowledged, and the
	// longest the sender was seen to wait before a send of one (evidence
	// tells that one was seen).
	progress    map[Identity]*progress
	refused     time.Time
	expected    map[Identity]time.Time
	outstanding int
	observed    time.Duration
	evidence    bool
}

// entry is what the destination remembers of a key: the request that took
// it and, once done, the answer to replay.
type entry struct {
	req    request
	done   bool
	status int
	body   []byte
}

// request is a decoded body: what two requests with one key must share.
type request struct {
	id     Identity
	digest string
}

// Start listens on 127.0.0.1 on a port of the system's choosing (ctx bounds
// only that) and serves until [Server.Close]. logf, which may be nil,
// receives one line per request.
func Start(ctx context.Context, logf func(string, ...any)) (*Server, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("destination: listen on the loopback: %w", err)
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	s := &Server{
		logf:      logf,
		url:       "http://" + ln.Addr().String(),
		served:    make(chan struct{}),
		done:      make(chan struct{}),
		attempts:  map[Identity]int{},
		processed: map[Identity]int{},
		keys:      map[string]*entry{},
		planned:   map[slot]*Fault{},
		progress:  map[Identity]*progress{},
		expected:  map[Identity]time.Time{},
		last:      time.Now(),
		changed:   make(chan struct{}),
	}
	s.ln = &gate{Listener: ln, s: s}
	s.http = &http.Server{
		Handler:           http.HandlerFunc(s.handle),
		ReadHeaderTimeout: 10 * time.Second,
	}
	s.http.SetKeepAlivesEnabled(false)
	go func() {
		defer close(s.served)
		if err := s.http.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logf("destination %s: serve: %v", s.url, err)
		}
	}()
	return s, nil
}

// ForgetRequests stops keeping the records of requests from now on:
// [Server.Requests] and [Server.RequestsFor] return only those made
// before. The counts ([Server.Processed]) and the keys are kept. A soak of
// a million events needs only the counts, and a record with its body
// costs about a kilobyte.
func (s *Server) ForgetRequests() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forget = true
}

// record numbers rec and keeps it, unless ForgetRequests was called. The
// caller holds s.mu.
func (s *Server) record(rec *Record) {
	s.seq++
	rec.Seq = s.seq
	if !s.forget {
		s.records = append(s.records, rec)
	}
}

// URL is the destination's base URL, http://127.0.0.1:PORT, for
// adapters.Env.Destination. It stays the same across Down and Up.
func (s *Server) URL() string { return s.url }

// Close stops the destination: it closes the listener and every connection,
// drops the requests in progress (held or slow ones included) and returns
// once every handler has returned. The records stay readable.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.done)
		s.mu.Unlock()
		err := s.http.Close()
		<-s.served
		s.mu.Lock()
		for s.inFlight > 0 {
			ch := s.changed
			s.mu.Unlock()
			<-ch
			s.mu.Lock()
		}
		s.mu.Unlock()
		if err != nil {
			s.closeErr = fmt.Errorf("destination %s: close: %w", s.url, err)
		}
	})
	return s.closeErr
}

// Requests returns a copy of every record, in arrival order.
func (s *Server) Requests() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, len(s.records))
	for i, r := range s.records {
		out[i] = copyRecord(r)
	}
	return out
}

// RequestsFor returns a copy of the records of the valid requests for ev's
// identity, in arrival order (so Attempt is 1, 2, ...).
func (s *Server) RequestsFor(ev adapters.Event) []Record {
	id := IdentityOf(ev)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Record
	for _, r := range s.records {
		if r.Valid && r.Identity == id {
			out = append(out, copyRecord(r))
		}
	}
	return out
}

// Processed returns how many times the destination processed ev's identity.
func (s *Server) Processed(ev adapters.Event) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.processed[IdentityOf(ev)]
}

// ProcessedAll returns a copy of every identity's processed count, for
// checking that nothing was processed for an event never applied.
func (s *Server) ProcessedAll() map[Identity]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[Identity]int, len(s.processed))
	for id, n := range s.processed {
		out[id] = n
	}
	return out
}

// ProcessedTotal returns how many requests the destination processed, over
// every identity: a cheap measure of progress.
func (s *Server) ProcessedTotal() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

func copyRecord(r *Record) Record {
	c := *r
	c.Body = slices.Clone(r.Body)
	return c
}

// begin counts a request in progress, or tells that the server is closed.
func (s *Server) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.inFlight++
	s.touchLocked()
	return true
}

func (s *Server) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	s.touchLocked()
}

// touchLocked notes activity for Quiet, Settle and Close.
func (s *Server) touchLocked() {
	s.last = time.Now()
	s.notifyLocked()
}

// notifyLocked wakes whoever waits on s.changed.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if !s.begin() {
		drop(w)
		return
	}
	defer s.end()
	if r.URL.Path != external.Path {
		s.logf("destination: %s %s: 404", r.Method, r.URL.Path)
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		s.logf("destination: %s %s: 405", r.Method, r.URL.Path)
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, rerr := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	rec := &Record{At: time.Now(), Key: r.Header.Get(external.KeyHeader), Body: body}
	req, derr := decode(body)
	if rerr != nil {
		derr = fmt.Errorf("read body: %w", rerr)
	}
	s.mu.Lock()
	s.record(rec)
	var f *Fault
	if derr == nil {
		rec.Valid, rec.Identity, rec.PayloadDigest = true, req.id, req.digest
		s.attempts[req.id]++
		rec.Attempt = s.attempts[req.id]
		f = s.planned[slot{req.id, rec.Attempt}]
		s.beginLocked(req.id)
		// Deferred after s.end, so it runs before it: how the request
		// ended is noted by the time it stops being in flight.
		defer s.ended(rec)
	}
	s.mu.Unlock()
	if derr != nil {
		s.reply(w, rec, answer{status: http.StatusBadRequest, body: errorBody(derr.Error())}, derr.Error())
		return
	}
	if f != nil {
		s.setFault(rec, f)
	}
	switch {
	case f != nil && f.action == actFail:
		f.fire()
		s.reply(w, rec, answer{status: f.status, body: errorBody("injected failure")}, "")
	case f != nil && f.action == actHold:
		f.fire()
		select {
		case <-f.release:
		case <-s.done:
		case <-r.Context().Done():
		}
		s.drop(w, r, rec)
	default:
		a, finish := s.apply(rec, r.Header.Values(external.KeyHeader), req)
		defer finish()
		if f != nil && f.action == actDrop {
			f.fire()
			finish()
			s.drop(w, r, rec)
			return
		}
		if f != nil && f.action == actSlow {
			f.fire()
			t := time.NewTimer(f.delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-s.done:
				finish()
				s.drop(w, r, rec)
				return
			case <-r.Context().Done():
				finish()
				s.drop(w, r, rec)
				return
			}
		}
		finish()
		s.reply(w, rec, a, a.reason)
	}
}

// answer is what the idempotency layer decided.
type answer struct {
	status   int
	body     []byte
	replayed bool
	reason   string
}

// apply runs the idempotency layer for a valid request. finish, which may
// be called more than once, completes the key's entry if this request took
// the key: until then, other requests with the key get 409.
func (s *Server) apply(rec *Record, keys []string, req request) (answer, func()) {
	nothing := func() {}
	if len(keys) != 1 || keys[0] == "" || len(keys[0]) > maxKeyLen {
		why := fmt.Sprintf("exactly one %s header of 1 to %d bytes is required", external.KeyHeader, maxKeyLen)
		return answer{status: http.StatusBadRequest, body: errorBody(why), reason: why}, nothing
	}
	key := keys[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.keys[key]
	switch {
	case ok && e.req != req:
		why := "idempotency key reused with another request"
		return answer{status: http.StatusUnprocessableEntity, body: errorBody(why), reason: why}, nothing
	case ok && !e.done:
		why := "a request with this idempotency key is in progress"
		return answer{status: http.StatusConflict, body: errorBody(why), reason: why}, nothing
	case ok:
		return answer{status: e.status, body: e.body, replayed: true}, nothing
	}
	s.processed[req.id]++
	s.total++
	n := s.processed[req.id]
	rec.Processed, rec.Effect = true, n
	body, _ := json.Marshal(struct {
		Effect int `json:"effect"`
	}{n})
	e = &entry{req: req, status: http.StatusCreated, body: append(body, '\n')}
	s.keys[key] = e
	var once sync.Once
	return answer{status: e.status, body: e.body}, func() {
		once.Do(func() {
			s.mu.Lock()
			e.done = true
			s.mu.Unlock()
		})
	}
}

func (s *Server) setFault(rec *Record, f *Fault) {
	s.mu.Lock()
	rec.Fault = f.kind
	s.mu.Unlock()
}

// reply writes a, unless the client has gone, and records the outcome.
func (s *Server) reply(w http.ResponseWriter, r *Record, a answer, reason string) {
	s.mu.Lock()
	r.Status, r.Replayed, r.Reason = a.status, a.replayed, reason
	r.Outcome = Answered
	seq := r.Seq
	s.mu.Unlock()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if a.replayed {
		h.Set(ReplayedHeader, "true")
	}
	w.WriteHeader(a.status)
	if _, err := w.Write(a.body); err != nil {
		s.mu.Lock()
		r.Outcome = Abandoned
		s.mu.Unlock()
	}
	s.logf("destination: request %d key %q: %d replayed=%t %s", seq, r.Key, a.status, a.replayed, reason)
}

// drop records the request as dropped, or Abandoned when the client went
// first (Close cancels the request's context too: that is no client
// going), then closes the connection without an answer. The record comes
// first, so that it is final when the client sees the connection close.
func (s *Server) drop(w http.ResponseWriter, r *http.Request, rec *Record) {
	s.mu.Lock()
	rec.Outcome = Dropped
	if r.Context().Err() != nil && !s.closed {
		rec.Outcome = Abandoned
	}
	s.mu.Unlock()
	drop(w)
	s.logf("destination: request %d key %q: %s", rec.Seq, rec.Key, rec.Outcome)
}

// drop closes w's connection without writing anything.
func drop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			_ = c.Close()
			return
		}
	}
	// The server closes the connection and writes nothing.
	panic(http.ErrAbortHandler)
}

func errorBody(why string) []byte {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{why})
	return append(b, '\n')
}

// decode checks and decodes a body: the JSON of an external.Request with
// exactly its three fields, namespace and id in standard padded base64 (id
// not empty), payload_digest as adapters.PayloadDigest writes it, and
// nothing after it, so that a body the reference client would never send
// is refused with a reason.
func decode(body []byte) (request, error) {
	// external.Request with pointers, to tell a missing field from an
	// empty one.
	var wire struct {
		Namespace     *string `json:"namespace"`
		ID            *string `json:"id"`
		PayloadDigest *string `json:"payload_digest"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&wire); err != nil {
		return request{}, fmt.Errorf("body is not the JSON of an effect request: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return request{}, errors.New("body has data after the JSON object")
	}
	switch {
	case wire.Namespace == nil:
		return request{}, errors.New(`body lacks "namespace"`)
	case wire.ID == nil:
		return request{}, errors.New(`body lacks "id"`)
	case wire.PayloadDigest == nil:
		return request{}, errors.New(`body lacks "payload_digest"`)
	}
	ns, err := base64.StdEncoding.Strict().DecodeString(*wire.Namespace)
	if err != nil {
		return request{}, fmt.Errorf(`"namespace" is not standard padded base64: %w`, err)
	}
	id, err := base64.StdEncoding.Strict().DecodeString(*wire.ID)
	if err != nil {
		return request{}, fmt.Errorf(`"id" is not standard padded base64: %w`, err)
	}
	if len(id) == 0 {
		return request{}, errors.New(`"id" is empty`)
	}
	if !isDigest(*wire.PayloadDigest) {
		return request{}, errors.New(`"payload_digest" is not 64 lower-case hex digits (adapters.PayloadDigest)`)
	}
	return request{id: Identity{Namespace: string(ns), ID: string(id)}, digest: *wire.PayloadDigest}, nil
}

func isDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
