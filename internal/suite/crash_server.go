package suite

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/provision"
)

// This file gives the plays that crash the server a server of their own.
//
// crash-recovery's plays crash the server and restart it: a play beside
// them would see its connections cut and its deliveries fail for a reason
// that is none of the implementation's, so on the run's server they run
// alone, after all the others, and the run waits for them (a second and a
// half of the reference's four on two cores). On a throwaway cluster a
// second one costs 0.2 s, copied from the same template: there they run
// on it, from the run's start, beside the others. Everywhere else (a
// server named by a DSN, where they do not run; a container, whose second
// would take longer to start than they take; a replicated formation,
// where a crash is no scenario) they run alone as before, and so they do
// when the second cluster cannot start, which the log says.

// wantsCrashRun reports whether the run starts a server of their own for
// plays, those of the run that crash the server: some are selected, the
// run's server is a throwaway cluster, where a second is cheap, and the
// run plays more than one play at a time.
func (s *state) wantsCrashRun(plays []*enginePlay) bool {
	return len(plays) > 0 && s.run != nil && s.run.Server().Kind == provision.KindCluster && s.playsAtOnce() > 1
}

// startCrashRun starts a harness run on a server of its own, of the kind
// of the run's, with the run's options, and sets s.crashRun. It returns
// the error of a run that could not start.
func (s *state) startCrashRun(ctx context.Context) error {
	opts := s.cfg.provision
	opts.DSN, opts.Only = "", s.run.Server().Kind
	run, err := harness.Start(ctx, harness.Options{
		Provision:          opts,
		DeliveryTimeout:    s.cfg.deliveryTimeout,
		RedeliveryPatience: s.cfg.redeliveryPatience,
		Seed:               s.seed,
		Logf:               s.cfg.logf,
	})
	if err != nil {
		return err
	}
	s.addDSN(run.Server().DSN())
	s.mu.Lock()
	s.crashRun = run
	s.mu.Unlock()
	return nil
}

// runFor is the harness run on whose server pn plays: the crash run for
// a play that crashes the server, once it has one, else the run's.
func (s *state) runFor(pn *playNode) *harness.Run {
	if pn.sharesCrash {
		if r := s.crashRunOrNil(); r != nil {
			return r
		}
	}
	return s.run
}

// crashRunOrNil is the run of the plays that crash the server, if they
// have one of their own.
func (s *state) crashRunOrNil() *harness.Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crashRun
}

// dispatchWithCrashRun runs plays as dispatch does, with slots, and
// apart, which crash the server, beside them on a server of their own,
// started now; when it cannot start, apart run after the others, alone,
// on the run's server. It returns once every play is done.
//
// apart take none of the slots: the gain is in running their chain of
// waits (instances, holds, crash, restart, redeliveries) beside the
// others, which fill the cores meanwhile. Counted against the bound, the
// reference's certification took 4.3 s where the base took 4.1 s; held to
// one slot, 4.0 s against 3.6 s uncounted (medians of 6, alternating, on
// two cores).
func (s *state) dispatchWithCrashRun(plays, apart []*enginePlay, slots chan struct{}) {
	var onOwn sync.WaitGroup
	ownServer := make(chan bool, 1)
	onOwn.Go(func() {
		start := s.startCrashRun
		if s.cfg.startCrashRun != nil {
			start = s.cfg.startCrashRun
		}
		ctx, cancel := context.WithTimeout(s.ctx, setupTimeout)
		err := start(ctx)
		cancel()
		if err != nil {
			if s.ctx.Err() == nil {
				s.cfg.logf("the plays that crash the server run after the others, alone: a server of their own did not start: %v", err)
			}
			ownServer <- false
			return
		}
		ownServer <- true
		s.crashTogether(apart)
	})
	s.dispatch(plays, slots)
	if !<-ownServer {
		s.crashTogether(apart)
	}
	onOwn.Wait()
}

// playNames lists the names of plays, separated by "; ".
func playNames(plays []*enginePlay) string {
	names := make([]string, len(plays))
	for i, ep := range plays {
		names[i] = ep.pn.name
	}
	return strings.Join(names, "; ")
}

// closeCrashRun releases the crash run, if the run started one.
func (s *state) closeCrashRun(ctx context.Context) error {
	run := s.crashRunOrNil()
	if run == nil {
		return nil
	}
	if err := run.Close(ctx); err != nil {
		return fmt.Errorf("harmless: release the database of the plays that crash the server: %w", err)
	}
	return nil
}

// faultsFired is what fired in the whole run: on its server, and on the
// crash run's, if it had one.
func (s *state) faultsFired() map[string]int64 {
	fired := map[string]int64{}
	for _, run := range []*harness.Run{s.run, s.crashRunOrNil()} {
		if run == nil {
			continue
		}
		for kind, n := range run.FaultsFired() {
			fired[kind] += n
		}
	}
	return fired
}

// unreachableAnywhere is unreachable for the run's server, then for the
// crash run's, if it had one: on either, an implementation that
// acknowledged deliveries without connecting through the DSN it was given
// is out of reach of the faults on the wire.
func (s *state) unreachableAnywhere() error {
	if err := unreachable(s.run); err != nil {
		return err
	}
	return unreachable(s.crashRunOrNil())
}
