package soak

import "time"

// Config is what a soak is asked to do.
type Config struct {
	// Duration bounds the load; Events bounds it by the number of events
	// generated. With both zero the soak runs for DefaultDuration.
	Duration time.Duration `json:"duration_ns"`
	Events   int           `json:"events"`
	// Workers is the number of implementation instances, at least two,
	// each delivering one event at a time with its own connections.
	Workers int `json:"workers"`
	// Duplicates is the share of events delivered more than once beyond
	// the redeliveries of failed deliveries: at once, later, or
	// concurrently to another worker.
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
}

// Defaults of the command's flags.
const (
	DefaultDuration   = 60 * time.Second
	DefaultWorkers    = 4
	DefaultDuplicates = 0.3
	DefaultConflicts  = 0.01
)
