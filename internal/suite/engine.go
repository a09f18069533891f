package suite

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"time"

	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/shortdur"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// This file is the engine: it plays a registration's tree (tree.go)
// without a test framework, for Certify and Run, and holds what Register's
// specs run as well: a play's run under its timeout, the judging of
// its rules and the release of its play. It owns the budgets, the
// selection of rules and the certificate; nothing here reads a test
// framework's state.

// gatherGrace is how long a play's gather function may take to return
// once its context ended, before the engine gives up waiting for it (as
// Ginkgo's grace period does for a node).
const gatherGrace = 30 * time.Second

// certify plays every fixture of the tree that the selection keeps, one
// after another, and builds the certificate. It stops before the next
// play once s.ctx is done.
func (s *state) certify() error {
	s.started = time.Now()
	if err := s.ctx.Err(); err != nil {
		s.cancelled = true
		return s.finish(context.Background())
	}
	if s.setupErr = s.setUp(s.ctx); s.setupErr != nil {
		return s.finish(context.Background())
	}
	for _, fx := range s.root.children {
		s.certifyFixture(fx)
		if s.ctx.Err() != nil {
			s.cancelled = true
			break
		}
	}
	return s.finish(context.Background())
}

// certifyFixture runs the plays of the fixture fx that have a rule
// the selection keeps, and reports the fixture's progress.
func (s *state) certifyFixture(fx *node) {
	for _, pn := range fx.plays() {
		if !slices.ContainsFunc(pn.rules, s.selected) {
			continue
		}
		if s.ctx.Err() != nil {
			return
		}
		pn.run(s.ctx)
		for _, rec := range pn.rules {
			if s.selected(rec) {
				s.judge(rec)
			}
		}
		if err := s.closePlay(pn); err != nil {
			s.closeErrs = append(s.closeErrs, err)
		}
	}
	s.fixtureDone(fx.fixture)
}

// selected reports whether the run's selection keeps rec's rule.
func (s *state) selected(rec *specRecord) bool {
	return s.cfg.rules == nil || slices.Contains(s.cfg.rules, rec.rule.ID)
}

// gatherFailure is the panic with which a failed assertion of the harness
// ends a gather function (see must); the engine recovers it, and
// the play's rules fail with its message.
type gatherFailure struct{ message string }

// must is the harness's own assertion in a gather function (the ledger
// could be read, the fault could be armed): an error ends the gather
// function, and fails the play, saying what could not be done (what: a
// format and its arguments). The play's run recovers the panic, and,
// in a goroutine the gather function started, state.recoverGather.
func must(err error, what ...any) {
	if err == nil {
		return
	}
	msg := err.Error()
	if len(what) > 0 {
		format, _ := what[0].(string)
		msg = fmt.Sprintf(format, what[1:]...) + ": " + msg
	}
	panic(gatherFailure{message: msg})
}

// recoverGather, deferred in a goroutine that a gather function starts,
// ends the goroutine when an assertion in it fails, and fails the play
// that runs.
func (s *state) recoverGather() {
	if r := recover(); r != nil {
		s.mu.Lock()
		pn := s.current
		s.mu.Unlock()
		if pn == nil {
			panic(r)
		}
		pn.fail(failureOf(r))
	}
}

// failureOf is the message of the panic r of a gather function: a failed
// assertion's, or the harness's own panic with its stack.
func failureOf(r any) string {
	if f, ok := r.(gatherFailure); ok {
		return f.message
	}
	return fmt.Sprintf("the harness panicked: %v\n%s", r, debug.Stack())
}

// fail records why the play could not finish, the first reason
// only.
func (pn *playNode) fail(msg string) {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	if pn.failure == "" {
		pn.failure = msg
	}
}

// run plays pn: its gather function, within ctx and the play's
// timeout. A gather function that has not returned by then is
// given gatherGrace, then left behind, and the play fails saying so.
func (pn *playNode) run(ctx context.Context) {
	s := pn.s
	s.mu.Lock()
	s.current = pn
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.current = nil
		s.mu.Unlock()
	}()
	pn.started = time.Now()
	defer func() { pn.ended = time.Now() }()
	if pn.gatherF == nil {
		return
	}
	gctx, cancel := context.WithTimeout(ctx, pn.timeout())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				pn.fail(failureOf(r))
			}
		}()
		pn.gatherF(gctx)
	}()
	select {
	case <-done:
	case <-gctx.Done():
		select {
		case <-done:
		case <-time.After(gatherGrace):
			pn.fail(fmt.Sprintf("the play %s did not return within %s of its end; it was left running", pn.name, shortdur.Format(gatherGrace)))
		}
	}
	switch {
	case ctx.Err() != nil:
		pn.stopped = true
	case errors.Is(gctx.Err(), context.DeadlineExceeded):
		pn.fail(fmt.Sprintf("the play timed out after %s, its budget and %s in which to gather the evidence\n%s",
			shortdur.Format(pn.timeout()), shortdur.Format(budgetSlack), pn.report()))
	}
}

// judge records the verdict of rec in its play, which has run: the
// play's failure when it could not finish, else its check's judgement.
// A play the run's stop cut short judges nothing.
func (s *state) judge(rec *specRecord) {
	pn := rec.play
	rec.started, rec.ended = pn.started, pn.ended
	switch {
	case pn.stopped:
		rec.state = specUnrun
		return
	case pn.failure != "":
		rec.state, rec.message = specFailed, s.secrets.String(pn.failure)
	default:
		j := rec.judge()
		switch {
		case j.inapplicable:
			rec.state, rec.message = specNotApplicable, j.unsupported
		case j.unsupported != "":
			rec.state, rec.message = specNotSupported, j.unsupported
		case len(j.problems) > 0:
			rec.state, rec.message, rec.judged, rec.checked = specFailed, failureMessage(rec.rule, j), j, true
		default:
			rec.state, rec.message = specPassed, j.note
		}
	}
	s.cfg.logf("%-7s %s (%.1fs)", rec.state.word(), rec.where+" / "+rec.rule.ID+": "+rec.rule.Doc, rec.ended.Sub(rec.started).Seconds())
}

// closePlay releases the play's [harness.Play], once its rules are
// judged, and keeps the crashes of its instances and what it needed of
// the broker for the certificate.
func (s *state) closePlay(pn *playNode) error {
	var errs []error
	for _, closer := range slices.Backward(pn.closers) {
		ctx, cancel := context.WithTimeout(context.Background(), s.cleanupTimeout())
		errs = append(errs, closer(ctx))
		cancel()
	}
	pn.closers = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("harmless: clean up the play %s: %w", pn.name, err)
	}
	return nil
}

// newPlay gives pn a fresh play (its own schema and instances), closed
// once pn's rules are judged, when the crashes of its instances are kept
// for the certificate.
func (s *state) newPlay(ctx context.Context, pn *playNode) *harness.Play {
	play, err := s.run.NewPlayWith(ctx, s.adapter, harness.PlayOptions{Title: pn.name, DisruptsServer: pn.disrupts})
	must(err, "create the play's environment")
	pn.closers = append(pn.closers, func(ctx context.Context) error {
		for _, n := range slices.Sorted(maps.Keys(play.CrashCounts())) {
			crashes := play.CrashesOf(n)
			s.crashes = append(s.crashes, certificate.Crash{Play: pn.name, Instance: n, Count: len(crashes), First: crashes[0]})
		}
		r := play.Redelivery()
		s.redelivery.LongestWait = max(s.redelivery.LongestWait, r.LongestWait.Seconds())
		s.redelivery.GaveUp += r.GaveUp
		if err := play.Close(ctx); err != nil {
			return fmt.Errorf("clean up the play's environment: %w", err)
		}
		return nil
	})
	return play
}
