package faults

import "context"

// Armed is what every armed fault tells, whatever injects it: its kind and
// how often it fired. A fault that never fired proves nothing, so whoever
// arms one counts its firings through this interface: [*Fault] and the
// wire proxy's faults (package faults/pgproxy) implement it, and so do the
// harness's Go hooks and its record of a server crash.
type Armed interface {
	// Kind names where the fault is injected and what it does, never
	// which event it targets, so that kinds are the same from run to run:
	// "db:<action>@<point>" ([Fault.Kind]), "hook:<action>" (the
	// harness's Go hooks), "proxy:<action>@<point>" (the proxy's rules),
	// "server:crash".
	Kind() string
	// Fired reports how many times the fault fired so far. A firing is
	// counted before the fault acts, so a firing whose transaction rolled
	// back, whose backend ended or whose connection was cut counts.
	Fired(ctx context.Context) (int64, error)
}

// The faults of this package are Armed.
var _ Armed = (*Fault)(nil)
