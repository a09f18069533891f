// Package external is the wire contract of the external destination that
// harmless runs for the external-effect fixture (docs/external-effects.md),
// and a small client for it.
//
// An implementation that declares adapters.Declaration.ExternalEffects
// makes each applied event's external effect with one request:
//
//	POST {Env.Destination}/effects
//	Idempotency-Key: <a key derived from the event's identity>
//	Content-Type: application/json
//
//	{"namespace":"<base64>","id":"<base64>","payload_digest":"<adapters.PayloadDigest>"}
//
// The destination honours keys as Stripe and the IETF Idempotency-Key
// draft do: the first request with a key is processed (201); a repeat with
// the same key and the same body replays the first answer, with the header
// Idempotent-Replayed: true, and is not processed again; the same key with
// another body is refused with 422; a repeat while the first is still being
// processed gets 409. It counts the effects it processed itself, so what an
// implementation reports cannot change the count.
//
// Namespace and id travel in base64 because an identity may hold bytes
// that are not UTF-8, which JSON would replace and so merge two events.
package external

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/harmless-dev/harmless/adapters"
)

const (
	// Path is where the destination takes effects.
	Path = "/effects"
	// KeyHeader carries the idempotency key.
	KeyHeader = "Idempotency-Key"
	// DefaultTimeout bounds one request when Send is given no client.
	DefaultTimeout = 10 * time.Second
)

// Request is the JSON body of one effect.
type Request struct {
	// Namespace is the event's namespace, in standard base64 with padding.
	Namespace string `json:"namespace"`
	// ID is the event's id, in standard base64 with padding.
	ID string `json:"id"`
	// PayloadDigest is adapters.PayloadDigest of the event's payload.
	PayloadDigest string `json:"payload_digest"`
}

// NewRequest returns the body of ev's effect.
func NewRequest(ev adapters.Event) Request {
	return Request{
		Namespace:     base64.StdEncoding.EncodeToString([]byte(ev.Namespace)),
		ID:            base64.StdEncoding.EncodeToString([]byte(ev.ID)),
		PayloadDigest: adapters.PayloadDigest(ev.Payload),
	}
}

// Key derives an idempotency key from ev's identity alone: the same event
// gets the same key on every retry, redelivery, instance and restart, and two
// events never share one (the namespace's length is part of what is
// hashed, so no namespace/id split collides with another). Any key with
// those two properties will do; this one is a safe default.
func Key(ev adapters.Event) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(ev.Namespace)))])
	h.Write([]byte(ev.Namespace))
	h.Write([]byte(ev.ID))
	return "harmless-v1-" + hex.EncodeToString(h.Sum(nil))
}

// ErrConflict is the destination's answer to a key reused with another
// request (422): retrying cannot help.
var ErrConflict = errors.New("idempotency key reused with another request")

// Send makes ev's external effect: it posts NewRequest(ev) to destination
// with key. It returns nil once the destination acknowledged the effect,
// processed now or before (a replay). It returns an error wrapping
// ErrConflict on 422, and another error, worth retrying with the same key,
// on any other answer or a transport error: a request whose answer was lost
// may have been processed, and only the same key makes its retry harmless.
// A nil client means one with DefaultTimeout.
func Send(ctx context.Context, client *http.Client, destination, key string, ev adapters.Event) error {
	if client == nil {
		client = &http.Client{Timeout: DefaultTimeout}
	}
	body, err := json.Marshal(NewRequest(ev))
	if err != nil {
		return fmt.Errorf("external effect of %s: %w", ev, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(destination, "/")+Path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("external effect of %s: %w", ev, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(KeyHeader, key)
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("external effect of %s: %w", ev, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == http.StatusUnprocessableEntity:
		return fmt.Errorf("external effect of %s: %w (%s: %s)", ev, ErrConflict, resp.Status, bytes.TrimSpace(answer))
	}
	return fmt.Errorf("external effect of %s: destination answered %s: %s", ev, resp.Status, bytes.TrimSpace(answer))
}
