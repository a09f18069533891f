package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/destination"
)

// QuietPeriod is how long the destination must have had no request before
// the harness takes an implementation that cannot be drained (no
// [adapters.Drainer]) to be idle. A relay that waits longer than this
// between two sends is judged before it sends.
const QuietPeriod = time.Second

// Destination is a play's external destination: a [destination.Server]
// whose fault methods also record the fault, so that the run counts its
// firings (kinds "dest:<action>"). The play starts it when the adapter
// declares external effects and closes it with the play.
type Destination struct {
	server *destination.Server
	play   *Play
}

// OpenDestination starts the play's external destination and returns it;
// every instance built from then on gets its URL as
// [adapters.Env.Destination]. Only the plays of the external-effect
// fixture open one: elsewhere Env.Destination is "" and the implementation
// makes no external effect, so that its relay's connections cannot take
// the faults other fixtures aim at a worker's connections (a proxy cut
// after the first statement, at COMMIT). Call it before any instance is
// built; the play closes the destination.
func (s *Play) OpenDestination(ctx context.Context) (*Destination, error) {
	if s.adapter.Declares.ExternalEffects == adapters.NoExternalEffects {
		return nil, errors.New("the adapter declares no external effects: it has no destination")
	}
	s.mu.Lock()
	built, open := len(s.instances) > 0, s.dest != nil
	s.mu.Unlock()
	switch {
	case open:
		return nil, errors.New("the play's destination is open already")
	case built:
		return nil, errors.New("an instance was built before the destination opened: it has no URL")
	}
	server, err := destination.Start(ctx, nil)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.dest = &Destination{server: server, play: s}
	s.mu.Unlock()
	return s.dest, nil
}

// Destination returns the play's destination; nil until OpenDestination.
func (s *Play) Destination() *Destination {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dest
}

// URL is the destination's base URL, handed to every instance as
// [adapters.Env.Destination].
func (d *Destination) URL() string { return d.server.URL() }

// Fail plans a 500 or 503 answer (see [destination.Server.Fail]).
func (d *Destination) Fail(ev adapters.Event, attempt, status int) (*destination.Fault, error) {
	return d.recorded(d.server.Fail(ev, attempt, status))
}

// DropAfterProcess plans the external ambiguous outcome (see
// [destination.Server.DropAfterProcess]).
func (d *Destination) DropAfterProcess(ev adapters.Event, attempt int) (*destination.Fault, error) {
	return d.recorded(d.server.DropAfterProcess(ev, attempt))
}

// Slow plans a slow answer (see [destination.Server.Slow]).
func (d *Destination) Slow(ev adapters.Event, attempt int, delay time.Duration) (*destination.Fault, error) {
	return d.recorded(d.server.Slow(ev, attempt, delay))
}

// Hold plans a held request (see [destination.Server.Hold]).
func (d *Destination) Hold(ev adapters.Event, attempt int) (*destination.Fault, error) {
	return d.recorded(d.server.Hold(ev, attempt))
}

// Down takes the destination down until Up (see [destination.Server.Down]).
func (d *Destination) Down() (*destination.Fault, error) { return d.recorded(d.server.Down()) }

// Up ends the outage.
func (d *Destination) Up() { d.server.Up() }

// ProcessedTotal returns how many requests the destination processed.
func (d *Destination) ProcessedTotal() int { return d.server.ProcessedTotal() }

// ForgetRequests keeps only the destination's counts from now on (see
// [destination.Server.ForgetRequests]).
func (d *Destination) ForgetRequests() { d.server.ForgetRequests() }

// Records returns every request the destination read, and every connection
// it refused, in arrival order.
func (d *Destination) Records() []destination.Record { return d.server.Requests() }

// Processed returns how many times the destination processed ev's identity.
func (d *Destination) Processed(ev adapters.Event) int { return d.server.Processed(ev) }

func (d *Destination) recorded(f *destination.Fault, err error) (*destination.Fault, error) {
	if err != nil {
		return nil, err
	}
	d.play.record(f)
	return f, nil
}

// aborter is implemented by instances that can be stopped abruptly, as a
// process is killed: exec instances (SIGKILL of every process).
type aborter interface {
	Abort(ctx context.Context) error
}

// Stop stops instance n abruptly, as a crash of its process would, and
// forgets it, so that [Play.Instance] with another number builds a new
// instance on the same schema. An instance with an Abort(ctx) method is
// aborted; any other is closed, which for an implementation with external
// effects must not drain them (docs/external-effects.md). It returns how
// the instance was stopped, "aborted" or "closed".
func (s *Play) Stop(ctx context.Context, n int) (string, error) {
	s.mu.Lock()
	impl, ok := s.instances[n]
	delete(s.instances, n)
	if r, reports := impl.(crashReporter); reports {
		if s.stoppedCrashes == nil {
			s.stoppedCrashes = map[int][]string{}
		}
		s.stoppedCrashes[n] = append(s.stoppedCrashes[n], r.Crashes()...)
	}
	s.mu.Unlock()
	if !ok {
		return "", fmt.Errorf("stop instance %d: no such instance", n)
	}
	if a, ok := impl.(aborter); ok {
		_, err := guard(ctx, s.run.opts.DeliveryTimeout, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, a.Abort(ctx)
		})
		if err != nil {
			return "aborted", fmt.Errorf("abort instance %d: %w", n, err)
		}
		return "aborted", nil
	}
	if err := guardClose(ctx, impl, s.run.opts.DeliveryTimeout); err != nil {
		return "closed", fmt.Errorf("close instance %d: %w", n, err)
	}
	return "closed", nil
}

// Drain waits until the play's instances have made the external effects
// committed so far: it calls Drain on every instance that implements
// [adapters.Drainer], each bounded by the delivery timeout; when none
// does, or one answers that it cannot (an error wrapping
// errors.ErrUnsupported, as an exec child without drain), it waits until
// the destination has had no request for [QuietPeriod], bounded by the
// delivery timeout. It returns what it did, for the evidence.
func (s *Play) Drain(ctx context.Context) (string, error) {
	if s.Destination() == nil {
		return "", errors.New("the play has no destination: OpenDestination was not called")
	}
	ctx, release, ok := s.bounded(ctx)
	defer release()
	if !ok {
		return "", fmt.Errorf("drain: %w", ErrBudgetExpired)
	}
	s.mu.Lock()
	ns := make([]int, 0, len(s.instances))
	for n := range s.instances {
		ns = append(ns, n)
	}
	instances := s.instances
	s.mu.Unlock()
	slices.Sort(ns)
	var drained []int
	quiet := len(ns) == 0
	for _, n := range ns {
		d, ok := instances[n].(adapters.Drainer)
		if !ok {
			quiet = true
			continue
		}
		_, err := guard(ctx, s.run.opts.DeliveryTimeout, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, d.Drain(ctx)
		})
		switch {
		case errors.Is(err, errors.ErrUnsupported):
			quiet = true
		case err != nil:
			return fmt.Sprintf("drained instances %v", drained), fmt.Errorf("drain instance %d: %w", n, err)
		default:
			drained = append(drained, n)
		}
	}
	what := fmt.Sprintf("drained instances %v", drained)
	if !quiet {
		return what, nil
	}
	if len(drained) == 0 {
		what = ""
	} else {
		what += ", then "
	}
	what += fmt.Sprintf("waited for %s without a request at the destination", QuietPeriod)
	qctx, cancel := context.WithTimeout(ctx, s.run.opts.DeliveryTimeout)
	defer cancel()
	if err := s.dest.server.Quiet(qctx, QuietPeriod); err != nil {
		return what, err
	}
	return what, nil
}

// destinationURL is the destination's URL, "" without one.
func (s *Play) destinationURL() string {
	if s.dest == nil {
		return ""
	}
	return s.dest.URL()
}

// closeDestination closes the play's destination, after its instances.
func (s *Play) closeDestination() error {
	if s.dest == nil {
		return nil
	}
	return s.dest.server.Close()
}
