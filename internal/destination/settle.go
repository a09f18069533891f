package destination

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// progress is what the destination knows of one identity's requests, for
// [Server.Settle]. It is kept for every identity that had a valid request,
// after [Server.ForgetRequests] too: a soak's drain needs it as much as a
// play's, and it is a few words, not a record with its body.
type progress struct {
	// inProgress counts the identity's requests read and not yet ended.
	inProgress int
	// final tells that the latest of its requests to have ended, in the
	// order they arrived (seq is its Record.Seq), got a final answer (see
	// finalAnswer). Arrival order, not the order they ended: a handler
	// notes its request's end a moment after the sender saw it, and the
	// sender's retry may have ended first.
	final bool
	seq   int
	// first is when its first request arrived, ended when the last of
	// its requests to end ended, and gap the longest from the end of one
	// of its requests to the arrival of the next, while none was in
	// progress: how long the sender waited before it sent again.
	first, ended time.Time
	gap          time.Duration
	// tried is when the destination last refused a connection before
	// the first request arrived: a refused connection carries no
	// identity, but one refused after the commit is the sender's first
	// try, made while the destination was down.
	tried time.Time
}

// finalAnswer reports whether rec, once ended, told its sender something
// no retry changes: an answer it received with a status below 500 other
// than 409 (201, a replay, 400, 422). A 5xx, a 409 (the key in progress),
// a dropped connection or an answer the sender never read leaves the
// effect in doubt for the sender, and a correct relay sends it again.
func finalAnswer(rec *Record) bool {
	return rec.Outcome == Answered && rec.Status < http.StatusInternalServerError && rec.Status != http.StatusConflict
}

// owedLocked reports whether the destination still owes the sender of
// id's effect an acknowledgement: nothing was processed for id yet, a
// request for it is in progress, or the latest of them to have ended was
// not answered for good, so that the sender will retry. The caller holds
// s.mu.
func (s *Server) owedLocked(id Identity) bool {
	p := s.progress[id]
	return s.processed[id] == 0 || p == nil || p.inProgress > 0 || !p.final
}

// beginLocked counts a valid request for id in progress. The caller holds
// s.mu.
func (s *Server) beginLocked(id Identity) {
	was := s.owedLocked(id)
	p := s.progress[id]
	if p == nil {
		p = &progress{}
		s.progress[id] = p
	}
	now := time.Now()
	switch {
	case p.first.IsZero():
		p.first, p.tried = now, s.refused
	case p.inProgress == 0:
		p.gap = max(p.gap, now.Sub(p.ended))
	}
	p.inProgress++
	if _, expected := s.expected[id]; expected && !was {
		s.outstanding++ // sent again: owed until it ends
	}
}

// ended notes how a valid request ended, once its answer is written or its
// connection closed, and before the request stops counting as in flight.
func (s *Server) ended(rec *Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := rec.Identity
	p := s.progress[id]
	was := s.owedLocked(id)
	p.inProgress--
	p.ended = time.Now()
	if rec.Seq > p.seq {
		p.final, p.seq = finalAnswer(rec), rec.Seq
	}
	now := s.owedLocked(id)
	if _, expected := s.expected[id]; expected {
		switch {
		case was && !now:
			s.outstanding--
		case !was && now:
			s.outstanding++
		}
		if !now {
			s.observeLocked(id)
		}
	}
}

// Expect tells the destination that the effect of each identity in owed is
// owed to it, committed at the time given (zero when the caller does not
// know it). It returns how many of them it did not expect already. An
// identity stays expected for the destination's life; expecting it again
// keeps the earlier commit time.
func (s *Server) Expect(owed map[Identity]time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	added := 0
	for id, at := range owed {
		old, ok := s.expected[id]
		switch {
		case !ok:
			added++
			if s.owedLocked(id) {
				s.outstanding++
			}
		case old.IsZero() || (!at.IsZero() && at.Before(old)):
		default:
			continue
		}
		s.expected[id] = at
		if !s.owedLocked(id) {
			s.observeLocked(id)
		}
	}
	s.notifyLocked()
	return added
}

// observeLocked takes how long the sender of id's effect waited before
// each of its sends (after the commit for the first, after the end of the
// one before for the others; a connection refused between the commit and
// the first request counts as a send) as evidence of its pace. The caller
// holds s.mu, and id is expected and not owed.
func (s *Server) observeLocked(id Identity) {
	at := s.expected[id]
	if at.IsZero() {
		return
	}
	p := s.progress[id]
	first := p.first.Sub(at)
	if p.tried.After(at) {
		first = max(p.tried.Sub(at), p.first.Sub(p.tried))
	}
	s.evidence = true
	s.observed = max(s.observed, first, p.gap)
}

// Settlement is how [Server.Settle] ended.
type Settlement struct {
	// Expected counts the identities [Server.Expect] was told of; Owed
	// those of them still owed an acknowledgement.
	Expected, Owed int
	// Quiet is the period without requests it ended on: the settle once
	// nothing was owed and it had evidence, the pace otherwise.
	Quiet time.Duration
	// Settled tells that it ended on the settle: every expected effect
	// acknowledged, then the settle without a request.
	Settled bool
	// Observed is the longest the sender was seen to wait before a send
	// of an expected effect: from its commit to its first request, or
	// from the end of a request to the next for it.
	Observed time.Duration
}

// Settle returns once every effect [Server.Expect] was told of has been
// acknowledged (processed, and the last request for it answered for good)
// and the destination has then had no request in progress and none
// arriving for a settle, or, while an effect is still owed, once it has
// had none for pace counted from the call, as [Server.Quiet]; or with an
// error when ctx ends first.
//
// The settle is the longest the sender was seen to wait before a send of
// an expected effect (from the commit to its first request, from the end
// of a request to the next for the same effect), at least floor and at
// most pace, counted from the last request: once nothing is owed a correct
// sender has nothing more to send, and what the settle is for is a sender
// that sends an acknowledged effect again (a relay that lost track of its
// row, two relays that took the same one). Such a resend comes at the
// sender's own pace, a poll or a backoff after the send before, and how
// long it waited before the sends it made is what the destination has
// seen of that pace. Without that evidence (nothing
// expected, or no commit time known) the settle is the whole pace, from
// the call. Every request that arrives meanwhile restarts the wait, and a
// resend that ends without a final answer makes its effect owed again.
func (s *Server) Settle(ctx context.Context, pace, floor time.Duration) (Settlement, error) {
	called := time.Now()
	var st Settlement
	err := s.await(ctx, func() (time.Duration, time.Time) {
		st = Settlement{Expected: len(s.expected), Owed: s.outstanding, Quiet: pace, Observed: s.observed}
		if s.outstanding > 0 || !s.evidence {
			return pace, later(s.last, called)
		}
		st.Quiet, st.Settled = min(pace, max(floor, s.observed)), true
		return st.Quiet, s.last
	})
	if err != nil {
		return st, fmt.Errorf("destination %s: wait for the effects owed and a quiet period: %w", s.url, err)
	}
	return st, nil
}
