package soak

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/harness"
)

// Bounds of the checker's table of distinct errors: a run that fails the same
// way a million times keeps one string, and one that fails a million
// different ways keeps MaxErrors of them.
const (
	// MaxErrors is how many distinct error lines the checker keeps.
	MaxErrors = 4096
	// MaxErrorLen truncates one error line, so the table stays bounded.
	MaxErrorLen = 512
	// MoreErrors stands for every distinct error beyond MaxErrors.
	MoreErrors = "(more distinct errors)"
)

// chunkBits sizes the chunks the checker grows by (4096 records): growing
// never copies what was recorded, and a small run holds little.
const (
	chunkBits = 12
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1
)

// EventID names the i-th generated event within the soak's namespace.
func EventID(i uint32) string { return "e" + strconv.FormatUint(uint64(i), 10) }

// ParseEventID is EventID's inverse; it accepts only what EventID writes.
func ParseEventID(s string) (uint32, bool) {
	digits, ok := strings.CutPrefix(s, "e")
	if !ok || digits == "" || (len(digits) > 1 && digits[0] == '0') {
		return 0, false
	}
	for _, r := range digits {
		if r < '0' || r > '9' {
			return 0, false
		}
	}
	i, err := strconv.ParseUint(digits, 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(i), true
}

// rec is one delivery as the checker holds it: an Op without its event
// (the event's list says which) and with its small fields packed, 32 bytes.
type rec struct {
	invoke, ret       int64
	next              uint32 // the event's previous recorded op, index+1; 0 ends
	err               uint32
	instance, attempt uint16
	bits              uint8
}

// Layout of rec.bits.
const (
	bitConflicting = 1 << 0
	statusShift    = 1 // 2 bits
	outcomeShift   = 3 // 2 bits; 0 is an outcome out of range
	refusalShift   = 5 // 2 bits
	bitHung        = 1 << 7
)

func pack(op Op) rec {
	b := uint8(op.Status&3) << statusShift
	if op.Variant == Conflicting {
		b |= bitConflicting
	}
	if harness.ValidOutcome(op.Outcome) {
		b |= uint8(op.Outcome) << outcomeShift
	}
	b |= uint8(op.Refusal&3) << refusalShift
	if op.Hung {
		b |= bitHung
	}
	return rec{
		invoke: int64(op.Invoke), ret: int64(op.Return),
		err: op.Err, instance: op.Instance, attempt: op.Attempt, bits: b,
	}
}

func (r rec) op(event uint32) Op {
	op := Op{
		Event: event, Instance: r.instance, Attempt: r.attempt,
		Status:  Status(r.bits>>statusShift) & 3,
		Outcome: adapters.Outcome(r.bits>>outcomeShift) & 3,
		Refusal: Refusal(r.bits>>refusalShift) & 3,
		Err:     r.err, Hung: r.bits&bitHung != 0,
		Invoke: time.Duration(r.invoke), Return: time.Duration(r.ret),
	}
	if r.bits&bitConflicting != 0 {
		op.Variant = Conflicting
	}
	return op
}

// facts is what the checker knows of one event besides its deliveries: 12
// bytes. Counts saturate; an event with more than one effect keeps the
// others in Checker.extra.
type facts struct {
	head         uint32 // last recorded op, index+1; 0 for none
	firstAttempt uint16 // the first ledger effect's attempt
	dest         uint16 // requests the destination processed
	effects      uint8
	conflicting  uint8 // effects of the conflicting copy
	applied      uint8 // deliveries acknowledged Applied
	flags        uint8
}

const (
	flagFirstConflicting = 1 << 0
	flagUnsettled        = 1 << 1
	flagAnswered         = 1 << 2 // a delivery was acknowledged or refused
)

type effect struct {
	attempt uint16
	variant Variant
}

// Checker holds a soak's history compactly and judges it. Record is safe for
// concurrent use; Effect and Destination feed the ledger and the destination
// after the run, and Check judges it all.
type Checker struct {
	namespace string
	// suspicious counts events acknowledged Applied more than once, read
	// without the lock for the progress line.
	suspicious atomic.Int64

	mu      sync.Mutex
	ops     []*[chunkSize]rec
	nops    uint32
	events  []*[chunkSize]facts
	nevents uint32 // one past the highest event seen
	extra   map[uint32][]effect
	hasDest bool
	errs    []string // errs[0] is "", none
	errIdx  map[string]uint32
}

// NewChecker returns an empty checker for the events of namespace.
func NewChecker(namespace string) *Checker {
	return &Checker{
		namespace: namespace,
		extra:     make(map[uint32][]effect),
		errs:      []string{""},
		errIdx:    make(map[string]uint32),
	}
}

// event returns the facts of event i, growing the table to hold it. The
// caller holds c.mu.
func (c *Checker) event(i uint32) *facts {
	for int(i>>chunkBits) >= len(c.events) {
		c.events = append(c.events, new([chunkSize]facts))
	}
	if i >= c.nevents {
		c.nevents = i + 1
	}
	return &c.events[i>>chunkBits][i&chunkMask]
}

// Record adds one completed delivery. It keeps the first line of err (the
// error the delivery ended with, nil for none) in the checker's bounded table
// and sets op.Err to it, whatever op.Err was.
func (c *Checker) Record(op Op, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	op.Err = 0
	if err != nil {
		op.Err = c.intern(err)
	}
	if c.nops == math.MaxUint32-1 {
		return // four billion deliveries: the history is full
	}
	f := c.event(op.Event)
	if int(c.nops>>chunkBits) >= len(c.ops) {
		c.ops = append(c.ops, new([chunkSize]rec))
	}
	r := pack(op)
	r.next = f.head
	c.ops[c.nops>>chunkBits][c.nops&chunkMask] = r
	c.nops++
	f.head = c.nops
	if op.Status != Info {
		f.flags |= flagAnswered
	}
	if op.Status == OK && op.Outcome == adapters.Applied {
		if f.applied == 1 {
			c.suspicious.Add(1)
		}
		if f.applied < math.MaxUint8 {
			f.applied++
		}
	}
}

// intern returns err's index in the table of distinct errors. The caller
// holds c.mu.
func (c *Checker) intern(err error) uint32 {
	line, _, _ := strings.Cut(err.Error(), "\n")
	if len(line) > MaxErrorLen {
		line = line[:MaxErrorLen] + "…"
	}
	if i, ok := c.errIdx[line]; ok {
		return i
	}
	if len(c.errIdx) >= MaxErrors {
		line = MoreErrors
		if i, ok := c.errIdx[line]; ok {
			return i
		}
	}
	i := uint32(len(c.errs))
	c.errs = append(c.errs, strings.Clone(line))
	c.errIdx[c.errs[i]] = i
	return i
}

// Error returns the error line an Op.Err indexes, "" for none.
func (c *Checker) Error(i uint32) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if int(i) < len(c.errs) {
		return c.errs[i]
	}
	return ""
}

// Suspicious counts the events acknowledged Applied more than once so far:
// cheap, for the progress line; Check says which of them are anomalies.
func (c *Checker) Suspicious() int { return int(c.suspicious.Load()) }

// Effect adds one ledger effect of event, by the attempt that applied it.
// An effect of an event past every recorded one is ignored: no delivery of
// this run can have made it, and a stray index must not grow the table.
func (c *Checker) Effect(event uint32, attempt int, v Variant) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if event >= c.nevents {
		return
	}
	a := uint16(min(max(attempt, 0), math.MaxUint16))
	f := c.event(event)
	if f.effects == 0 {
		f.firstAttempt = a
		if v == Conflicting {
			f.flags |= flagFirstConflicting
		}
	} else {
		c.extra[event] = append(c.extra[event], effect{a, v})
	}
	if f.effects < math.MaxUint8 {
		f.effects++
	}
	if v == Conflicting && f.conflicting < math.MaxUint8 {
		f.conflicting++
	}
}

// Unsettled marks event as never acknowledged because the run was
// interrupted before its redeliveries were made, or ended because the
// implementation acknowledged nothing any more (see NoAckError): Check does
// not judge it lost (it still judges the rest).
func (c *Checker) Unsettled(event uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if event < c.nevents {
		c.event(event).flags |= flagUnsettled
	}
}

// UnsettleUnanswered marks every event none of whose deliveries was
// acknowledged or refused as Unsettled: when the implementation stopped
// answering (see NoAckError), an event it never answered is no evidence of
// how it deduplicates, whether its redeliveries were still due or had run
// out of patience.
func (c *Checker) UnsettleUnanswered() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.nevents {
		if f := c.event(i); f.head != 0 && f.flags&flagAnswered == 0 {
			f.flags |= flagUnsettled
		}
	}
}

// Destination records how many requests the external destination processed
// for event. Once it was called for any event, an event it was not called for
// counts as processed by none. Like Effect, it ignores events past every
// recorded one.
func (c *Checker) Destination(event uint32, processed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hasDest = true
	if event >= c.nevents {
		return
	}
	c.event(event).dest = uint16(min(max(processed, 0), math.MaxUint16))
}

// Bytes is roughly what the checker holds, for the benchmark's bytes/event.
func (c *Checker) Bytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.ops)*chunkSize*32 + len(c.events)*chunkSize*12
	n += len(c.extra) * (8 + 24 + 2*4) // key, slice, about two effects
	for _, s := range c.errs {
		n += len(s) + 16 + 4 + 16 // table, map key and value, map overhead
	}
	return n
}

func (c *Checker) effectsOf(i uint32, f *facts) []effect {
	if f.effects == 0 {
		return nil
	}
	first := effect{f.firstAttempt, Original}
	if f.flags&flagFirstConflicting != 0 {
		first.variant = Conflicting
	}
	return append([]effect{first}, c.extra[i]...)
}

// Check judges the history: per event, whether the ledger (and the
// destination) hold exactly one effect of the original, and whether the
// deliveries' outcomes are linearizable against one deduplicated event.
// Anomalies come in event order. It looks at ctx between windows of
// windowSize events: when ctx ends it stops and returns what it judged so far
// (Totals.Events then counts the events judged).
func (c *Checker) Check(ctx context.Context) (Totals, []Anomaly, []Unknown) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var (
		t         Totals
		anomalies []Anomaly
		unknowns  []Unknown
		em        = eventModel()
		model     = em.ToModel()
		visuals   int
		w         window
	)
	for start := uint32(0); start < c.nevents; start += windowSize {
		if ctx.Err() != nil {
			break
		}
		end := min(start+windowSize, c.nevents)
		c.gather(&w, start, end)
		w.judge(&em, model)
		for i := start; i < end; i++ {
			f := &c.events[i>>chunkBits][i&chunkMask]
			if f.head == 0 {
				continue // never delivered: not one of the run's events
			}
			k := i - start
			ops := w.ops[w.offs[k]:w.offs[k+1]]
			t.Events++
			t.Deliveries += len(ops)
			wrong := w.wrong[k]
			var effs []effect
			if f.effects > 0 {
				effs = c.effectsOf(i, f)
			}
			for _, op := range ops {
				switch op.Status {
				case OK:
					switch op.Outcome {
					case adapters.Applied:
						t.Applied++
					case adapters.Duplicate:
						t.Duplicate++
					case adapters.Rejected:
						t.Rejected++
					}
				case Fail:
					t.Refused++
				case Info:
					t.Unknown++
					applied := slices.ContainsFunc(effs, func(e effect) bool { return e.attempt == op.Attempt })
					if applied {
						t.UnknownApplied++
					} else {
						t.UnknownNotApplied++
					}
					if len(unknowns) < MaxListedUnknowns {
						unknowns = append(unknowns, Unknown{
							ID: EventID(i), Attempt: int(op.Attempt),
							Error: c.errs[op.Err], Applied: applied,
						})
					}
				}
			}

			lost := f.effects == 0 || (c.hasDest && f.dest == 0)
			if f.flags&flagUnsettled != 0 {
				// Its redeliveries were never made: not judged lost.
				t.Unsettled++
				lost = false
			}
			duplicated := f.effects > 1 || (c.hasDest && f.dest > 1)
			conflict := f.conflicting > 0
			if !lost && !duplicated && !conflict && !wrong {
				continue
			}
			a := Anomaly{Namespace: c.namespace, ID: EventID(i)}
			var why []string
			if lost {
				t.Lost++
				a.Kinds = append(a.Kinds, "lost")
				why = append(why, explainLost(ops, effs))
			}
			if duplicated {
				t.Duplicated++
				a.Kinds = append(a.Kinds, "duplicated")
				why = append(why, explainDuplicated(effs, c.hasDest, f.dest))
			}
			if wrong {
				t.Wrong++
				a.Kinds = append(a.Kinds, "wrong")
				why = append(why, explainWrong(ops, effs, lost || duplicated))
				if visuals < MaxVisualized {
					if page := c.visualize(model, ops); page != "" {
						a.Visualization = page
						visuals++
					}
				}
			}
			if conflict {
				t.ConflictsApplied++
				a.Kinds = append(a.Kinds, "conflict-applied")
				why = append(why, explainConflict(ops, effs))
			}
			a.Explanation = joinSentences(why)
			for _, e := range effs {
				a.Effects = append(a.Effects, EffectRecord{Attempt: int(e.attempt), Payload: e.variant.String()})
			}
			if c.hasDest {
				d := int(f.dest)
				a.AtDestination = &d
			}
			for _, op := range ops {
				a.History = append(a.History, c.delivery(op))
			}
			anomalies = append(anomalies, a)
		}
	}
	return t, anomalies, unknowns
}

// windowSize is how many events Check gathers at once: porcupine checks the
// window's events whose deliveries overlapped in one call, partitioned by
// event, which BenchmarkLinearizable measured 1.7 times faster than a call
// per event (its partitions run in parallel).
const windowSize = 1024

// window is the deliveries of windowSize consecutive events, in invocation
// order: event k's are ops[offs[k]:offs[k+1]]. Check reuses one.
type window struct {
	ops   []Op
	offs  []int
	wrong []bool
	hist  []porcupine.Operation
	parts [][]porcupine.Operation
	slow  []int // the events left to porcupine
}

// gather fills w with the deliveries of events [start, end). The caller
// holds c.mu.
func (c *Checker) gather(w *window, start, end uint32) {
	w.ops, w.offs = w.ops[:0], append(w.offs[:0], 0)
	for i := start; i < end; i++ {
		f := &c.events[i>>chunkBits][i&chunkMask]
		from := len(w.ops)
		for j := f.head; j != 0; {
			r := &c.ops[(j-1)>>chunkBits][(j-1)&chunkMask]
			w.ops = append(w.ops, r.op(i))
			j = r.next
		}
		sortOps(w.ops[from:])
		w.offs = append(w.offs, len(w.ops))
	}
}

// judge sets w.wrong for each of w's events: whether its deliveries are not
// linearizable against one deduplicated event.
func (w *window) judge(nm *porcupine.NondeterministicModel, model porcupine.Model) {
	n := len(w.offs) - 1
	w.wrong = append(w.wrong[:0], make([]bool, n)...)
	w.slow, w.hist, w.parts = w.slow[:0], w.hist[:0], w.parts[:0]
	for k := range n {
		ops := w.ops[w.offs[k]:w.offs[k+1]]
		if sequential(ops) {
			w.wrong[k] = !linearSequence(nm, ops)
		} else {
			w.slow = append(w.slow, k)
			w.hist = appendOperations(w.hist, ops, nil)
		}
	}
	if len(w.slow) == 0 {
		return
	}
	from := 0
	for _, k := range w.slow {
		m := w.offs[k+1] - w.offs[k]
		w.parts = append(w.parts, w.hist[from:from+m])
		from += m
	}
	model.Partition = func([]porcupine.Operation) [][]porcupine.Operation { return w.parts }
	if porcupine.CheckOperations(model, w.hist) {
		return
	}
	// Some event is wrong (porcupine stopped at the first): say which.
	model.Partition = nil
	for i, k := range w.slow {
		w.wrong[k] = !porcupine.CheckOperations(model, w.parts[i])
	}
}

// sortOps puts an event's deliveries in invocation order.
func sortOps(ops []Op) {
	sort.Slice(ops, func(a, b int) bool {
		x, y := ops[a], ops[b]
		if x.Invoke != y.Invoke {
			return x.Invoke < y.Invoke
		}
		if x.Return != y.Return {
			return x.Return < y.Return
		}
		return x.Attempt < y.Attempt
	})
}

func (c *Checker) delivery(op Op) Delivery {
	d := Delivery{
		Attempt: int(op.Attempt), Instance: int(op.Instance),
		Payload: op.Variant.String(), Status: op.Status.String(),
		Error: c.errs[op.Err], Hung: op.Hung,
		Invoke: op.Invoke, Return: op.Return,
	}
	if op.Status == OK {
		d.Outcome = op.Outcome.String()
	}
	return d
}

// The model of one deduplicated event, for porcupine.

// modelState is the event as the implementation should hold it.
type modelState uint8

const (
	notApplied modelState = iota
	appliedOriginal
	appliedConflicting
)

func appliedAs(v Variant) modelState {
	if v == Conflicting {
		return appliedConflicting
	}
	return appliedOriginal
}

func (s modelState) String() string {
	switch s {
	case appliedOriginal:
		return "applied (original)"
	case appliedConflicting:
		return "applied (conflicting copy)"
	}
	return "not applied"
}

// modelInput is one delivery's call; modelOutput its completion.
type modelInput struct {
	Attempt, Instance uint16
	Variant           Variant
}

type modelOutput struct {
	Status  Status
	Outcome adapters.Outcome
	Refusal Refusal
}

func (o modelOutput) String() string {
	switch o.Status {
	case OK:
		return o.Outcome.String()
	case Fail:
		if o.Refusal == RefusedConflict {
			return "refused (conflict)"
		}
		return "refused (invalid)"
	}
	return "unknown"
}

// eventModel is one event deduplicated: it is applied once, by the first
// delivery to claim it, and every later delivery is answered by what it
// holds. A delivery whose outcome is unknown may or may not have claimed it.
func eventModel() porcupine.NondeterministicModel {
	// Step's answers, shared and never modified: ToModel copies them.
	var (
		none  = []any{}
		stay  = [3][]any{{notApplied}, {appliedOriginal}, {appliedConflicting}}
		apply = [2][]any{{appliedOriginal}, {appliedConflicting}}
		maybe = [2][]any{{notApplied, appliedOriginal}, {notApplied, appliedConflicting}}
	)
	return porcupine.NondeterministicModel{
		Init: func() []any { return stay[notApplied] },
		Step: func(state, input, output any) []any {
			s, in, out := state.(modelState), input.(modelInput), output.(modelOutput)
			other := appliedAs(1 - in.Variant)
			switch out.Status {
			case OK:
				switch out.Outcome {
				case adapters.Applied:
					if s == notApplied {
						return apply[in.Variant&1]
					}
				case adapters.Duplicate:
					// Any variant: without a conflict policy a
					// conflicting copy is answered Duplicate; the
					// certification fixtures check rejecting.
					if s != notApplied {
						return stay[s]
					}
				case adapters.Rejected:
					if s == other {
						return stay[s]
					}
				}
				return none
			case Fail:
				if out.Refusal == RefusedConflict {
					if s == other {
						return stay[s]
					}
					return none
				}
				// Refused as invalid: nothing applied; the ledger
				// says whether the event was lost.
				return stay[s]
			case Info:
				if s == notApplied {
					return maybe[in.Variant&1]
				}
				return stay[s]
			}
			return none
		},
		Hash: func(state any) uint64 { return uint64(state.(modelState)) + 1 },
		DescribeOperation: func(input, output any) string {
			in := input.(modelInput)
			return fmt.Sprintf("attempt %d i%d %s -> %s", in.Attempt, in.Instance, in.Variant, output.(modelOutput))
		},
		// Porcupine's tooltip sets the state and the metadata with
		// innerHTML (its operation descriptions with textContent): the
		// metadata is an error the implementation wrote, so it is escaped
		// here or its markup would run in the reader's browser. The states
		// are ours, escaped all the same in case one ever holds a '<'.
		DescribeState: func(state any) string { return html.EscapeString(state.(modelState).String()) },
		DescribeOperationMetadata: func(info any) string {
			if s, ok := info.(string); ok {
				return html.EscapeString(s)
			}
			return ""
		},
	}
}

func input(op Op) modelInput {
	return modelInput{Attempt: op.Attempt, Instance: op.Instance, Variant: op.Variant & 1}
}

func output(op Op) modelOutput {
	return modelOutput{Status: op.Status, Outcome: op.Outcome, Refusal: op.Refusal}
}

// appendOperations appends an event's deliveries to porcupine's history h,
// with their errors as metadata if errs is given. A hung delivery returns at
// the end of time, as its effect may land any time after its invocation.
// (In this model that cannot change a verdict, since only Applied needs the
// event not applied and after it no delivery may apply; it keeps the
// history honest in the visualization.)
func appendOperations(h []porcupine.Operation, ops []Op, errs []string) []porcupine.Operation {
	from := len(h)
	h = append(h, make([]porcupine.Operation, len(ops))...)
	for i, op := range ops {
		i += from
		ret := int64(op.Return)
		if op.Hung {
			ret = math.MaxInt64
		}
		h[i] = porcupine.Operation{
			ClientId: max(int(op.Instance)-1, 0), // porcupine's lanes are from 0
			Input:    input(op),
			Call:     int64(op.Invoke),
			Output:   output(op),
			Return:   ret,
		}
		if errs != nil && errs[op.Err] != "" {
			h[i].Metadata = errs[op.Err]
		}
	}
	return h
}

// linearizable reports whether an event's deliveries (in invocation order)
// are linearizable against one deduplicated event.
//
// Fast path, equivalent to porcupine: when each delivery was invoked after
// every earlier one had returned (porcupine's intervals are closed, so
// strictly after), real time orders them totally, the invocation order is the
// only linearization to try, and the history is linearizable iff the model
// steps through it from its initial states. That is what porcupine would
// find; stepping the set of possible states with the same Step function
// costs no allocation. An event with one delivery always takes it;
// porcupine is left with the events whose deliveries overlapped.
func linearizable(nm *porcupine.NondeterministicModel, model porcupine.Model, ops []Op) bool {
	if !sequential(ops) {
		return porcupine.CheckOperations(model, appendOperations(nil, ops, nil))
	}
	return linearSequence(nm, ops)
}

// linearSequence reports whether the model steps through ops in their
// order, from its initial states.
func linearSequence(nm *porcupine.NondeterministicModel, ops []Op) bool {
	var states uint8 // a set of modelState
	for _, s := range nm.Init() {
		states |= 1 << s.(modelState)
	}
	for _, op := range ops {
		in, out := input(op), output(op)
		var next uint8
		for s := notApplied; s <= appliedConflicting; s++ {
			if states&(1<<s) == 0 {
				continue
			}
			for _, n := range nm.Step(s, in, out) {
				next |= 1 << n.(modelState)
			}
		}
		if next == 0 {
			return false
		}
		states = next
	}
	return true
}

// sequential reports whether each of ops (in invocation order) was invoked
// after all the earlier ones had returned; a hung delivery never returned.
func sequential(ops []Op) bool {
	var end time.Duration = -1 << 63
	for i, op := range ops {
		if i > 0 && op.Invoke <= end {
			return false
		}
		if op.Hung {
			end = math.MaxInt64
		} else {
			end = max(end, op.Return)
		}
	}
	return true
}

// visualize renders porcupine's page of an event's history; "" if it could
// not.
func (c *Checker) visualize(model porcupine.Model, ops []Op) string {
	_, info := porcupine.CheckOperationsVerbose(model, appendOperations(nil, ops, c.errs), 0)
	var b bytes.Buffer
	if err := porcupine.Visualize(model, info, &b); err != nil {
		return ""
	}
	return b.String()
}

// Explanations: one clause per kind of anomaly, naming attempts, instances and
// times, so a reader can find the deliveries in the history.

func who(op Op) string { return fmt.Sprintf("attempt %d (instance %d)", op.Attempt, op.Instance) }

func at(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

func answered(op Op) string {
	out := output(op)
	if op.Status == Info {
		if op.Hung {
			return "hung"
		}
		return "ended unknown at " + at(op.Return)
	}
	return fmt.Sprintf("answered %s at %s", out, at(op.Return))
}

// describeLedger describes the effects, as "the ledger holds 2 effects (attempts 1
// and 3)".
func describeLedger(effs []effect) string {
	switch len(effs) {
	case 0:
		return "the ledger holds no effect"
	case 1:
		return fmt.Sprintf("the ledger holds 1 effect (attempt %d, %s)", effs[0].attempt, effs[0].variant)
	}
	as := make([]string, len(effs))
	for i, e := range effs {
		as[i] = strconv.Itoa(int(e.attempt))
		if e.variant == Conflicting {
			as[i] += " (conflicting copy)"
		}
	}
	list := strings.Join(as[:len(as)-1], ", ") + " and " + as[len(as)-1]
	return fmt.Sprintf("the ledger holds %d effects (attempts %s)", len(effs), list)
}

func isOutcome(op Op, o adapters.Outcome) bool { return op.Status == OK && op.Outcome == o }

func explainLost(ops []Op, effs []effect) string {
	if len(effs) > 0 {
		return fmt.Sprintf("%s but the destination processed no request for it", describeLedger(effs))
	}
	for _, op := range ops {
		if isOutcome(op, adapters.Applied) {
			return fmt.Sprintf("%s answered Applied at %s, yet the ledger holds no effect", who(op), at(op.Return))
		}
	}
	for _, op := range ops {
		if op.Status != OK {
			continue
		}
		s := fmt.Sprintf("no delivery was acknowledged Applied and the ledger holds no effect, though %s %s", who(op), answered(op))
		for _, u := range ops {
			if u.Status == Info && u.Invoke <= op.Return {
				// The marker-first shape: the unknown delivery
				// claimed the event and its effect never landed.
				s += fmt.Sprintf(" after %s had %s without applying anything", who(u), strings.TrimPrefix(answered(u), "answered "))
				break
			}
		}
		return s
	}
	var unknown, refused int
	for _, op := range ops {
		if op.Status == Info {
			unknown++
		} else {
			refused++
		}
	}
	return fmt.Sprintf("none of its %d deliveries was acknowledged (%d unknown, %d refused) and the ledger holds no effect", len(ops), unknown, refused)
}

func explainDuplicated(effs []effect, hasDest bool, dest uint16) string {
	var parts []string
	if len(effs) > 1 {
		parts = append(parts, describeLedger(effs))
	}
	if hasDest && dest > 1 {
		parts = append(parts, fmt.Sprintf("the destination processed %d requests for it", dest))
	}
	return strings.Join(parts, " and ")
}

func explainConflict(ops []Op, effs []effect) string {
	for _, e := range effs {
		if e.variant != Conflicting {
			continue
		}
		for _, op := range ops {
			if op.Attempt == e.attempt {
				return fmt.Sprintf("the ledger holds the conflicting copy's effect, by %s, which %s", who(op), answered(op))
			}
		}
		return fmt.Sprintf("the ledger holds the conflicting copy's effect, by attempt %d", e.attempt)
	}
	return "the ledger holds the conflicting copy's effect"
}

// explainWrong names the first pair (or single delivery) that no order of
// the deliveries can explain; the visualization shows the rest.
func explainWrong(ops []Op, effs []effect, saidLedger bool) string {
	end := func(op Op) time.Duration {
		if op.Hung {
			return math.MaxInt64
		}
		return op.Return
	}
	var applied []Op
	for _, op := range ops {
		if isOutcome(op, adapters.Applied) {
			applied = append(applied, op)
		}
	}
	tail := ""
	if !saidLedger {
		tail = "; " + describeLedger(effs)
	}
	if len(applied) > 1 {
		a, b := applied[0], applied[1]
		if end(a) < b.Invoke {
			return fmt.Sprintf("%s answered Applied at %s, after %s had returned Applied at %s%s", who(b), at(b.Return), who(a), at(a.Return), tail)
		}
		return fmt.Sprintf("%s and %s both answered Applied (at %s and %s)%s", who(a), who(b), at(a.Return), at(b.Return), tail)
	}
	for _, a := range applied {
		for _, d := range ops {
			if d.Status == OK && d.Outcome != adapters.Applied && end(d) < a.Invoke {
				return fmt.Sprintf("%s answered Applied at %s, after %s had returned %s at %s%s", who(a), at(a.Return), who(d), d.Outcome, at(d.Return), tail)
			}
		}
	}
	for _, d := range ops {
		answer := d.Status == OK && d.Outcome != adapters.Applied
		conflict := d.Status == Fail && d.Refusal == RefusedConflict
		if !answer && !conflict {
			continue
		}
		claimed := false
		for _, op := range ops {
			if (isOutcome(op, adapters.Applied) || op.Status == Info) && op.Invoke <= end(d) {
				claimed = true
			}
		}
		if !claimed {
			return fmt.Sprintf("%s %s, before any delivery that could have applied the event had been invoked%s", who(d), answered(d), tail)
		}
		if d.Outcome == adapters.Rejected || conflict {
			return fmt.Sprintf("%s (%s) %s, though no delivery of the other payload could have applied the event before%s", who(d), d.Variant, answered(d), tail)
		}
	}
	return fmt.Sprintf("no order of its %d deliveries gives their outcomes for one deduplicated event (see the visualization)%s", len(ops), tail)
}

// joinSentences makes sentences of the clauses.
func joinSentences(clauses []string) string {
	var b strings.Builder
	for i, s := range clauses {
		if s == "" {
			continue
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strings.ToUpper(s[:1]) + s[1:] + ".")
	}
	return b.String()
}
