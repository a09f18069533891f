package soak

import (
	"time"
)

// Report is everything a soak found, as harmless soak --json writes it.
type Report struct {
	// Adapter names the implementation: an adapter's name, or the exec
	// command line.
	Adapter string `json:"adapter"`
	// Config is what the run was asked to do; with Seed it repeats it.
	Config Config `json:"config"`
	// Started is when the load began; Elapsed how long it ran, settling
	// included.
	Started time.Time     `json:"started"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// Interrupted is set when the run was stopped (Ctrl-C) before the end
	// it was asked for: the report covers what ran.
	Interrupted bool        `json:"interrupted"`
	Environment Environment `json:"environment"`
	// Verdict is "clean" with zero lost, duplicated, wrong and conflicts
	// applied, else "anomalies"; "no-ack" when the soak ended because no
	// delivery was acknowledged for Config.NoAckTimeout (Error says why):
	// the events never acknowledged or refused are then unsettled, not
	// lost, and the anomalies counted are among the others.
	Verdict string `json:"verdict"`
	// Error says why the soak ended early without judging every event,
	// with verdict "no-ack": the NoAckError's message.
	Error string `json:"error,omitempty"`
	// Crashes lists, per instance, how often the implementation's
	// processes crashed and were restarted, and the first crash, as the
	// harness's supervisor of exec children records them (a certificate's
	// crashes, one play); instances without a crash are left out.
	Crashes []Crash `json:"crashes"`
	Totals  Totals  `json:"totals"`
	// Throughput is acknowledged deliveries per second while the load ran
	// (the settling phase excluded).
	Throughput float64 `json:"throughput"`
	// Latency is the delivery latency over the whole load.
	Latency Latency `json:"latency"`
	// Timeline has one entry per second of the run.
	Timeline []Second `json:"timeline"`
	// Faults is the nemesis's schedule, as it ran.
	Faults []FaultWindow `json:"faults"`
	// FaultsFired counts the faults that fired, by kind.
	FaultsFired map[string]int64 `json:"faults_fired"`
	// Drain says how the harness waited for the external effects after the
	// load (with the destination nemesis), and DrainError why it gave up:
	// the effects not made are then judged lost at the destination.
	Drain      string `json:"drain,omitempty"`
	DrainError string `json:"drain_error,omitempty"`
	// Anomalies lists every event with an anomaly, with its whole history.
	Anomalies []Anomaly `json:"anomalies"`
	// Unknowns resolves the deliveries whose outcome was unknown (info),
	// by what the ledger says happened; at most MaxListedUnknowns are
	// listed, Totals counts them all.
	Unknowns []Unknown `json:"unknowns"`
}

// Clean reports whether the run found no anomaly and judged every event.
func (r Report) Clean() bool { return r.Totals.Anomalous() == 0 && r.Verdict != verdictNoAck }

// CrashCount is how many times the implementation's processes crashed in
// all.
func (r Report) CrashCount() int {
	n := 0
	for _, c := range r.Crashes {
		n += c.Count
	}
	return n
}

// Crash is the crashes of one instance of the implementation during the
// soak: the shape of a certificate's crashes (suite/certificate.Crash), the
// soak being one play.
type Crash struct {
	// Instance is the instance number, from 1.
	Instance int `json:"instance"`
	// Count is how many times its processes crashed.
	Count int `json:"count"`
	// First describes the first crash: how the process failed and the
	// first lines of its crash report.
	First string `json:"first"`
}

// Environment is where the soak ran.
type Environment struct {
	Harmless      string `json:"harmless"`
	Go            string `json:"go"`
	OS            string `json:"os"`
	Arch          string `json:"arch"`
	CPUs          int    `json:"cpus"`
	Server        string `json:"server"`
	ServerVersion string `json:"server_version"`
}

// Totals are the checker's counts over the whole run.
type Totals struct {
	Events     int `json:"events"`
	Deliveries int `json:"deliveries"`
	// Acked counts deliveries acknowledged with an outcome, by outcome.
	Applied   int `json:"applied"`
	Duplicate int `json:"duplicate"`
	Rejected  int `json:"rejected"`
	// Refused counts Fail deliveries; Unknown counts Info ones.
	Refused int `json:"refused"`
	Unknown int `json:"unknown"`
	// UnknownApplied and UnknownNotApplied resolve the Unknown deliveries
	// by the ledger: the effect row names the attempt that applied it.
	UnknownApplied    int `json:"unknown_applied"`
	UnknownNotApplied int `json:"unknown_not_applied"`
	// Unsettled counts the events never acknowledged because an
	// interruption cut settling short: they are not judged lost, since
	// their redeliveries were never made.
	Unsettled int `json:"unsettled"`

	// The anomalies, counted per event.
	Lost             int `json:"lost"`
	Duplicated       int `json:"duplicated"`
	Wrong            int `json:"wrong"`
	ConflictsApplied int `json:"conflicts_applied"`
}

// Anomalous counts the anomalies found.
func (t Totals) Anomalous() int { return t.Lost + t.Duplicated + t.Wrong + t.ConflictsApplied }

// Latency is a set of latency percentiles.
type Latency struct {
	P50 time.Duration `json:"p50_ns"`
	P95 time.Duration `json:"p95_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
}

// Second is one second of the run.
type Second struct {
	// At is the second's start, from the run's start.
	At time.Duration `json:"at_ns"`
	// Completed counts the deliveries that ended in the second; Acked
	// those of them acknowledged with an outcome.
	Completed int `json:"completed"`
	Acked     int `json:"acked"`
	// Latency is over the deliveries that ended in the second.
	Latency Latency `json:"latency"`
	// Anomalies is left zero while running; the progress line counts
	// anomalies seen so far instead (see Progress).
}

// FaultWindow is one fault the nemesis injected, from when it began to when
// it was healed.
type FaultWindow struct {
	// Kind is the nemesis: kill, cut-before-commit, cut-after-commit,
	// db-raise, db-sleep, crash, failover, purge, destination.
	Kind string `json:"kind"`
	// Detail says what exactly was done; for a failover, its evidence
	// (which node was primary before and after, the timelines, when the
	// new primary took a write) and how long the formation took to get
	// its secondary back.
	Detail string        `json:"detail"`
	Start  time.Duration `json:"start_ns"`
	End    time.Duration `json:"end_ns"`
	// Err is set when the nemesis could not do it, or when what it did
	// lacks its evidence (a failover in which the primary did not move).
	Err string `json:"error,omitempty"`
}

// Anomaly is one event the checker found wrong, with its whole history.
type Anomaly struct {
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
	// Kinds are the anomalies: lost, duplicated, wrong, conflict-applied.
	Kinds []string `json:"kinds"`
	// Explanation says in a sentence what is wrong.
	Explanation string `json:"explanation"`
	// Effects are the ledger's effects of the event.
	Effects []EffectRecord `json:"effects"`
	// AtDestination counts the requests the destination processed for the
	// event, when the run had one.
	AtDestination *int `json:"at_destination,omitempty"`
	// History is every delivery of the event, in invocation order.
	History []Delivery `json:"history"`
	// Visualization is porcupine's HTML page of the event's history, for a
	// wrong outcome (at most MaxVisualized of them are kept).
	Visualization string `json:"visualization,omitempty"`
}

// EffectRecord is one ledger effect of an event.
type EffectRecord struct {
	Attempt int    `json:"attempt"`
	Payload string `json:"payload"` // original or conflicting copy
}

// Delivery is one delivery as a report spells it.
type Delivery struct {
	Attempt  int           `json:"attempt"`
	Instance int           `json:"instance"`
	Payload  string        `json:"payload"` // original or conflicting copy
	Status   string        `json:"status"`  // ok, fail, info
	Outcome  string        `json:"outcome,omitempty"`
	Error    string        `json:"error,omitempty"`
	Hung     bool          `json:"hung,omitempty"`
	Invoke   time.Duration `json:"invoke_ns"`
	Return   time.Duration `json:"return_ns"`
}

// Unknown is one delivery whose outcome was unknown, resolved by the
// ledger.
type Unknown struct {
	ID      string `json:"id"`
	Attempt int    `json:"attempt"`
	Error   string `json:"error"`
	// Applied reports whether the ledger holds this attempt's effect.
	Applied bool `json:"applied"`
}

// MaxListedUnknowns bounds Report.Unknowns; MaxVisualized bounds the
// anomalies that carry porcupine's visualisation.
const (
	MaxListedUnknowns = 200
	MaxVisualized     = 20
)
