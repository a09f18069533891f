package soak

import "time"

// Config is what a soak is asked to do.
type Config struct {
	// Duration bounds the load; Events bounds it by the number of events
	// generated. With both zero the soak runs for DefaultDuration.
	Duration time.Duration `json:"duration_ns"`
	Events   int           `json:"events"`
	// Instances is the number of implementation instances, at least two,
	// each delivering one event at a time with its own connections.
	Instances int `json:"instances"`
	// Duplicates is the share of events delivered more than once beyond
	// the redeliveries of failed deliveries: at once, later, or
	// concurrently to another instance.
	Duplicates float64 `json:"duplicates"`
	// Conflicts is the share of events that also get a conflicting copy
	// (same identity, another payload), once the original was acknowledged.
	Conflicts float64 `json:"conflicts"`
	// Nemeses names the faults to inject (see Nemeses); empty for none.
	Nemeses []string `json:"nemeses"`
	// Seed makes the event stream and the nemesis's schedule repeatable.
	Seed int64 `json:"seed"`
	// DeliveryTimeout bounds one delivery.
	DeliveryTimeout time.Duration `json:"delivery_timeout_ns"`
	// RedeliveryPatience is how long the broker goes on redelivering a
	// copy whose deliveries end unknown (see harness.Backoff for the
	// pauses); 0 means harness.DefaultRedeliveryPatience. A copy that runs
	// out of it while the nemesis is on is parked, and gets a whole
	// patience again once the faults are healed.
	RedeliveryPatience time.Duration `json:"redelivery_patience_ns,omitempty"`
	// NoAckTimeout ends the soak when no delivery was acknowledged (or
	// refused) for that long while deliveries kept ending with an unknown
	// outcome, no fault being in progress: the implementation is dead or
	// cannot work here, and going on would only drive deliveries at it and
	// judge every event lost (see NoAckError). 0 means
	// DefaultNoAckTimeout.
	NoAckTimeout time.Duration `json:"no_ack_timeout_ns,omitempty"`
}

// Defaults of the command's flags.
const (
	DefaultDuration   = 60 * time.Second
	DefaultInstances  = 4
	DefaultDuplicates = 0.3
	DefaultConflicts  = 0.01
	// DefaultNoAckTimeout is far longer than a correct implementation goes
	// without an acknowledgement once a fault is healed (a restart of its
	// crashed process takes a tenth of a second, a reconnection to a
	// restarted server well under a second), and short enough that a dead
	// one is named in seconds.
	DefaultNoAckTimeout = 10 * time.Second
)
