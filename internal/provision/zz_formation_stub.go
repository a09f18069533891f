package provision

// TEMPORARY STUB: replaced by the formation branch (i24-formation).

import (
	"context"
	"errors"
	"time"
)

const KindHA Kind = "ha"

type Node struct {
	Name string
	Port int
}

type FailoverKind string

const (
	FailoverControlled FailoverKind = "controlled"
	FailoverHardKill   FailoverKind = "hard-kill"
)

type Failover struct {
	Kind                          FailoverKind
	Before, After                 Node
	TimelineBefore, TimelineAfter int64
	SystemIDBefore, SystemIDAfter uint64
	Started                       time.Time
	Writable                      time.Duration
	Detail                        string
}

func (f Failover) Problem() string { return "" }
func (f Failover) String() string  { return "" }

type Lag struct {
	PrimaryFlush, StandbyReceived string
	Bytes                         int64
}

type ReplicationStall struct{}

func (*ReplicationStall) Lag(ctx context.Context) (Lag, error) { return Lag{}, errors.New("stub") }
func (*ReplicationStall) Resume() error                        { return errors.New("stub") }

type Formation struct{}

func (s *Server) Formation() *Formation { return nil }

func (f *Formation) WaitHealthy(ctx context.Context) error { return errors.New("stub") }
func (f *Formation) Failover(ctx context.Context, kind FailoverKind) (Failover, error) {
	return Failover{}, errors.New("stub")
}
func (f *Formation) SetSynchronous(ctx context.Context, on bool) error { return errors.New("stub") }
func (f *Formation) StallReplication(ctx context.Context) (*ReplicationStall, error) {
	return nil, errors.New("stub")
}
func (f *Formation) Primary(ctx context.Context) (Node, error) { return Node{}, errors.New("stub") }
