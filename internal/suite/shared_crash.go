package suite

import (
	"context"
	"sync"

	"github.com/harmless-dev/harmless/internal/harness"
)

// sharedCrash lets the plays that crash the server share their crashes: the
// engine runs them side by side (see [playNode.crashesTogether]), each plays
// up to the moment it needs the server crashed, and the last to get there
// crashes and restarts it for all of them. A crash ends every connection of
// the server, so the plays could not run beside each other otherwise, and a
// crash and its restart cost the same for one play as for three; what each
// play holds in the database (a sleep, a lock) simply holds a little longer,
// until the others are ready.
//
// Plays that run one after another (Register's specs, or a play that is
// alone in the group) each crash the server on their own: a play that
// arrives when every member has arrived crashes at once.
type sharedCrash struct {
	mu sync.Mutex
	// members are the plays of the group now running; arrived, those of
	// them waiting for the crash of the current round.
	members, arrived int
	round            *crashRound
}

// crashRound is one crash and restart, and what the plays waiting for it
// learn of it.
type crashRound struct {
	done chan struct{}
	rec  harness.Recovery
	err  error
}

// join adds a play to the group, before it starts.
func (c *sharedCrash) join() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members++
}

// leave removes a play from the group once it has ended. Should the others
// all be waiting for the crash, it crashes the server for them, within
// ctx, with crash.
func (c *sharedCrash) leave(ctx context.Context, crash func(context.Context) (harness.Recovery, error)) {
	c.mu.Lock()
	c.members--
	round := c.due()
	c.mu.Unlock()
	if round != nil {
		round.rec, round.err = crash(ctx)
		close(round.done)
	}
}

// crash waits until every play of the group running has asked for the
// crash or ended, then returns the recovery of the one crash and restart
// made for all of them, by crash, called by the last to arrive.
func (c *sharedCrash) crash(ctx context.Context, crash func(context.Context) (harness.Recovery, error)) (harness.Recovery, error) {
	c.mu.Lock()
	if c.round == nil {
		c.round = &crashRound{done: make(chan struct{})}
	}
	mine := c.round
	c.arrived++
	due := c.due()
	c.mu.Unlock()
	if due != nil {
		due.rec, due.err = crash(ctx)
		close(due.done)
	}
	select {
	case <-mine.done:
		return mine.rec, mine.err
	case <-ctx.Done():
		c.mu.Lock()
		if c.round == mine {
			c.arrived--
		}
		c.mu.Unlock()
		return harness.Recovery{}, context.Cause(ctx)
	}
}

// due returns the round to crash now, and starts the next, when every
// member has arrived; nil otherwise. c.mu is held.
func (c *sharedCrash) due() *crashRound {
	if c.round == nil || c.arrived == 0 || c.arrived < c.members {
		return nil
	}
	round := c.round
	c.round, c.arrived = nil, 0
	return round
}
