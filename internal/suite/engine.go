package suite

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// certify plays every fixture of the tree that the selection keeps and
// builds the certificate. Plays run side by side, at most
// [state.playsAtOnce] at a time, except those that crash, restart or fail
// over the server, which run alone (see [playNode.disruptsServer]): every play has
// its own schema, ledger, proxy and instances, so the others share only
// the server, which they only use. Their verdicts are reported in
// catalogue order all the same, each fixture's once all its plays have
// been judged, so the progress lines and the certificate read as if the
// plays had run one after another. The run stops starting plays once
// s.ctx is done.
func (s *state) certify() error {
	s.started = time.Now()
	if err := s.ctx.Err(); err != nil {
		s.cancelled = true
		return s.finish(context.Background())
	}
	if s.setupErr = s.setUp(s.ctx); s.setupErr != nil {
		return s.finish(context.Background())
	}
	var plays []*enginePlay
	byFixture := make(map[*node][]*enginePlay)
	for _, fx := range s.root.children {
		for _, pn := range fx.plays() {
			if slices.ContainsFunc(pn.rules, s.selected) {
				ep := &enginePlay{pn: pn, done: make(chan struct{})}
				plays = append(plays, ep)
				byFixture[fx] = append(byFixture[fx], ep)
			}
		}
	}
	// The plays that run alone go last, so that the others fill the time
	// before them side by side, and of those the long ones first, so that
	// the short ones fill the time beside them (the reference's certify
	// took 4.2 s instead of 4.65 s so, medians of 4 on 2 cores): the
	// order in which plays run changes no play, each having its own
	// schema, instances and random choices.
	byTurn := slices.Clone(plays)
	slices.SortStableFunc(byTurn, func(a, b *enginePlay) int {
		return cmp.Or(cmp.Compare(boolRank(a.pn.disrupts), boolRank(b.pn.disrupts)),
			cmp.Compare(boolRank(!a.pn.long), boolRank(!b.pn.long)))
	})
	dispatched := make(chan struct{})
	go func() {
		defer close(dispatched)
		s.dispatch(byTurn, s.playsAtOnce())
	}()
	for _, fx := range s.root.children {
		for _, ep := range byFixture[fx] {
			<-ep.done
			if !ep.started {
				continue
			}
			for _, rec := range ep.pn.rules {
				if s.selected(rec) {
					s.logVerdict(rec)
				}
			}
			if ep.closeErr != nil {
				s.closeErrs = append(s.closeErrs, ep.closeErr)
			}
		}
		s.fixtureDone(fx.fixture)
		if s.ctx.Err() != nil {
			s.cancelled = true
			break
		}
	}
	<-dispatched
	return s.finish(context.Background())
}

// Plays side by side. maxPlaysAtOnce was chosen by measurement on a
// 2-core machine: the reference's certify on a throwaway cluster took
// 8.3 s with 2 plays at once, 7.3 s with 3 and 6.9 s with 4 (medians of
// 3, before crash-recovery's plays shared their crash), then 5.4 s with 4
// against 5.7 to 8.3 s with 6 and 6.4 to 6.8 s with 8 (runs beside other
// work): past 4 the plays only wait for the two cores. connectionsPerPlay
// is what one play may hold open besides the contenders of a
// concurrent-delivery round, the pools' spares: a server with fewer free
// connections runs fewer plays at once, down to one.
const (
	maxPlaysAtOnce     = 4
	connectionsPerPlay = 8
)

// playsAtOnce is how many plays the run runs side by side at most: the
// option's, else maxPlaysAtOnce. Fewer run when the server has too few
// free connections for another (see roomForAPlay).
func (s *state) playsAtOnce() int {
	if s.cfg.playsAtOnce > 0 {
		return s.cfg.playsAtOnce
	}
	return maxPlaysAtOnce
}

// connectionsPerPlay is how many connections one play may open: its
// concurrent-delivery round's contenders and the pools' spares.
func (s *state) connectionsPerPlay() int {
	return s.cfg.concurrent.contenders + connectionsPerPlay
}

// roomForAPlay reports whether the server has the free connections one
// more play may open, asked before each play that would start beside
// others: on a server it shares, another run, another test or the
// application may take connections while the run goes on, and a play
// that met a full server would see its instances refused for a reason
// that is none of theirs. When the free connections cannot be read there
// is no room, and the error says why.
func (s *state) roomForAPlay() (free int, ok bool, err error) {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	if free, err = s.run.FreeConnections(ctx); err != nil {
		return 0, false, err
	}
	return free, free >= s.connectionsPerPlay(), nil
}

// boolRank orders false before true.
func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// enginePlay is a play as the engine schedules it: whether it started,
// why it could not be released, and done, closed once it has run, been
// judged and been released, or been skipped because the run stopped.
type enginePlay struct {
	pn       *playNode
	done     chan struct{}
	started  bool
	closeErr error
}

// dispatch runs plays, in their order, at most atOnce at a time; a play
// that runs alone waits for those running to end, and the next waits for
// it. Once s.ctx is done it starts no more: the rest are closed unstarted.
// It returns once every play it started is done.
func (s *state) dispatch(plays []*enginePlay, atOnce int) {
	slots := make(chan struct{}, atOnce)
	var running sync.WaitGroup
	defer running.Wait()
	// busy counts the plays running; each that ends says so on ended,
	// which holds a place for every play, so that none waits to say it.
	var busy atomic.Int32
	ended := make(chan struct{}, len(plays))
	heldBack := false
	for i := 0; i < len(plays); i++ {
		ep := plays[i]
		if ep.pn.disrupts {
			running.Wait()
		}
		if ep.pn.sharesCrash {
			// The plays that share their crash run together, alone.
			j := i + 1
			for j < len(plays) && plays[j].pn.sharesCrash {
				j++
			}
			s.crashTogether(plays[i:j])
			i = j - 1
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-s.ctx.Done():
		}
		// Beside other plays, a play starts only when the server has
		// room for it; alone, it always does.
		for s.ctx.Err() == nil && busy.Load() > 0 {
			free, ok, err := s.roomForAPlay()
			if ok {
				break
			}
			if !heldBack {
				heldBack = true
				if err != nil {
					s.cfg.logf("%v: plays wait for one another to end", err)
				} else {
					s.cfg.logf("the server has %d free connections, fewer than a play may open (%d): plays wait for one another to end", free, s.connectionsPerPlay())
				}
			}
			select {
			case <-ended:
			case <-s.ctx.Done():
			}
		}
		if s.ctx.Err() != nil {
			close(ep.done)
			continue
		}
		ep.started = true
		running.Add(1)
		busy.Add(1)
		go func() {
			defer running.Done()
			defer func() { <-slots }()
			defer func() {
				busy.Add(-1)
				ended <- struct{}{}
			}()
			defer close(ep.done)
			ep.closeErr = s.playOne(ep.pn)
		}()
		if ep.pn.disrupts {
			running.Wait()
		}
	}
}

// crashTogether runs plays, which share their crash (see sharedCrash), side
// by side, and returns once they have all ended.
func (s *state) crashTogether(plays []*enginePlay) {
	var names []string
	for _, ep := range plays {
		names = append(names, ep.pn.name)
	}
	s.cfg.logf("%d plays that crash the server start side by side, with no other, to share the crash: %s", len(plays), strings.Join(names, "; "))
	var running sync.WaitGroup
	for _, ep := range plays {
		if s.ctx.Err() != nil {
			close(ep.done)
			continue
		}
		ep.started = true
		s.crashShare.join()
		running.Add(1)
		go func() {
			defer running.Done()
			defer close(ep.done)
			ep.closeErr = s.playOne(ep.pn)
			// A play that ended without asking for its crash must not keep
			// the others waiting for it.
			s.crashShare.leave(s.ctx, s.crashServer)
		}()
	}
	running.Wait()
}

// playOne runs pn, judges the rules of it that the selection keeps and
// releases it.
func (s *state) playOne(pn *playNode) error {
	pn.run(s.ctx)
	for _, rec := range pn.rules {
		if s.selected(rec) {
			s.verdict(rec)
		}
	}
	return s.closePlay(pn)
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

// recoverGather, deferred in a goroutine that a gather function starts
// with its context ctx (or one made from it), ends the goroutine when an
// assertion in it fails, and fails the play ctx belongs to.
func (s *state) recoverGather(ctx context.Context) {
	if r := recover(); r != nil {
		pn, _ := ctx.Value(playKey{}).(*playNode)
		if pn == nil {
			panic(r)
		}
		pn.fail(failureOf(r))
	}
}

// playKey is the key under which a gather function's context carries its
// play, for recoverGather: plays run side by side, so a failure must find
// its own.
type playKey struct{}

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
	pn.started = time.Now()
	defer func() { pn.ended = time.Now() }()
	if pn.gatherF == nil {
		return
	}
	gctx, cancel := context.WithTimeout(context.WithValue(ctx, playKey{}, pn), pn.timeout())
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

// judge records the verdict of rec in its play, which has run, and logs
// it.
func (s *state) judge(rec *specRecord) {
	s.verdict(rec)
	s.logVerdict(rec)
}

// verdict records the verdict of rec in its play, which has run: the
// play's failure when it could not finish, else its check's judgement.
// A play the run's stop cut short judges nothing.
func (s *state) verdict(rec *specRecord) {
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
}

// logVerdict logs the verdict of rec, once judged, in a line.
func (s *state) logVerdict(rec *specRecord) {
	if rec.state == specUnrun {
		return
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
			s.mu.Lock()
			s.crashes = append(s.crashes, certificate.Crash{Play: pn.name, Instance: n, Count: len(crashes), First: crashes[0]})
			s.mu.Unlock()
		}
		r := play.Redelivery()
		s.mu.Lock()
		s.redelivery.LongestWait = max(s.redelivery.LongestWait, r.LongestWait.Seconds())
		s.redelivery.GaveUp += r.GaveUp
		s.mu.Unlock()
		if err := play.Close(ctx); err != nil {
			return fmt.Errorf("clean up the play's environment: %w", err)
		}
		return nil
	})
	return play
}
