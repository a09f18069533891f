// Package exec certifies implementations written in any language: it runs
// one as a child process and speaks the exec protocol with it, line-delimited
// JSON over the child's stdin and stdout (docs/protocol.md; codec in package
// protocol).
//
// [Probe] starts the command once to learn what the implementation declares
// and returns an [adapters.Adapter] that the suite certifies like any other
// (suite.Run, suite.Register, suite.Certify), named with the name the child
// declares in its hello. Each implementation instance the suite builds is a
// pool of child processes: requests go to a process with a free slot (each
// process declares how many requests it handles at once), and the pool
// starts another process when every slot is taken.
//
// The harness is never at the mercy of the child. Every request has a
// deadline; a process that crashes, closes its output, writes something that
// is not the protocol, stops reading its input or leaves a delivery
// unanswered until its deadline (wedged) is killed with its process group,
// and the requests it had in flight fail unacknowledged with an error that
// says what happened and quotes the child's stderr. The instance supervises its processes as systemd or Kubernetes
// would a consumer that exits: the next request that needs a process starts
// a new one, and the broker redelivers what was in flight. Restarts wait a
// tenth of a second after a crash, and a child that keeps crashing is backed
// off, its requests failing at once for a while, so that a crash loop ends
// quickly and costs little.
//
// An instance is an [adapters.Drainer]: Drain asks every process to drain
// its external effects, and returns an error wrapping [errors.ErrUnsupported]
// when the child does not implement that optional request. It also has
// Abort(ctx), which SIGKILLs every process of the instance, as a crash
// would, for the fixtures that stop an implementation between its commit
// and its external send, and Crashes(), which lists every crash of its
// processes so far with the start of each one's crash report: a crash is
// evidence even when the redelivery succeeds.
package exec

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
	"unicode"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/exec/protocol"
	"github.com/harmless-dev/harmless/internal/redact"
	"github.com/harmless-dev/harmless/internal/version"
)

// DefaultStartTimeout bounds the probe's handshake when
// [Config.StartTimeout] is zero.
const DefaultStartTimeout = 30 * time.Second

// Bounds of an instance that a Config does not set (this package's tests do).
const (
	defaultShutdownTimeout = 5 * time.Second
	defaultMaxProcesses    = 64
)

// Config says how to run an external implementation.
type Config struct {
	// Command is run with /bin/sh -c, so it may use shell syntax. It runs
	// in a subshell that alone holds the protocol's pipes, so that a child
	// that closes its stdout or stdin is seen to at once, even when the
	// shell does not exec it (see shellScript).
	Command string
	// Dir is the child's working directory; empty means the current one.
	Dir string
	// Env holds extra KEY=VALUE variables for the child, on top of the
	// harness's environment, HARMLESS_PROTOCOL and HARMLESS_INSTANCE.
	Env []string
	// StartTimeout bounds the probe's handshake; zero means
	// [DefaultStartTimeout]. Instances are bounded by the context the
	// harness gives their construction.
	StartTimeout time.Duration

	// shutdownTimeout bounds a child's exit after shutdown; then its
	// process group is killed. Zero means defaultShutdownTimeout.
	shutdownTimeout time.Duration
	// maxProcesses bounds the processes of one instance. Zero means
	// defaultMaxProcesses.
	maxProcesses int
}

func (c Config) startTimeout() time.Duration { return orDefault(c.StartTimeout, DefaultStartTimeout) }
func (c Config) shutdownWait() time.Duration {
	return orDefault(c.shutdownTimeout, defaultShutdownTimeout)
}

func (c Config) processLimit() int {
	if c.maxProcesses <= 0 {
		return defaultMaxProcesses
	}
	return c.maxProcesses
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Info is what the probe learned: the implementation's handshake.
type Info struct {
	// Protocol is the protocol version in use.
	Protocol int
	// Implementation is the name and version the child reported.
	Implementation protocol.Implementation
	// declares is what the implementation declared; the adapter Probe
	// returns carries it.
	declares adapters.Declaration
	// MaxInFlight is how many requests one process handles at once.
	MaxInFlight int
}

func (i Info) sameAs(o Info) bool {
	return i.Protocol == o.Protocol && i.Implementation == o.Implementation && i.declares == o.declares && i.MaxInFlight == o.MaxInFlight
}

func describe(i Info) string {
	return fmt.Sprintf("%s (protocol %d, conflict policy %q, window %s, accepts clock %t, external effects %q, max send delay %s, max in flight %d)",
		i.Implementation, i.Protocol, i.declares.ConflictPolicy, i.declares.RedeliveryWindow, i.declares.AcceptsClock, i.declares.ExternalEffects, i.declares.MaxSendDelay, i.MaxInFlight)
}

// errHandshake marks a child that could not complete hello: it is the wrong
// program, speaks another version or failed to start.
var errHandshake = errors.New("the implementation did not complete the handshake")

// errUnsupported is wrapped by the error of a request the child answered
// with the class "unsupported".
var errUnsupported = errors.New("not supported by the implementation")

// errDrainUnsupported is wrapped by the error of Drain on an instance whose
// child does not implement the optional request drain (it answered the
// class "unsupported"): the instance cannot say when its external effects
// have reached the destination, and the harness waits instead until the
// destination has heard nothing for a while. It wraps
// [errors.ErrUnsupported], so callers that do not import this package can
// recognise it too.
var errDrainUnsupported = fmt.Errorf("the implementation does not drain: %w", errors.ErrUnsupported)

// answerError is an error answer from the child.
type answerError struct {
	// Method is the request's method.
	Method string
	// Err is the answer.
	Err protocol.Error
	// Process names the process that answered.
	Process string
}

// Error says which process answered what.
func (e *answerError) Error() string {
	return fmt.Sprintf("%s answered %s with %s", e.Process, e.Method, e.Err.Error())
}

// Unwrap maps the error class to the harness's errors: invalid_input to
// [adapters.ErrInvalidInput], payload_conflict to
// [adapters.ErrPayloadConflict], unsupported to [errUnsupported]; a
// transient error wraps nothing.
func (e *answerError) Unwrap() error {
	switch e.Err.Class {
	case protocol.InvalidInput:
		return adapters.ErrInvalidInput
	case protocol.PayloadConflict:
		return adapters.ErrPayloadConflict
	case protocol.Unsupported:
		return errUnsupported
	}
	return nil
}

// Probe runs cfg.Command once, performs the handshake, shuts the child down
// and returns the adapter that certifies it, with what the child declared.
func Probe(ctx context.Context, cfg Config) (adapters.Adapter, Info, error) {
	if cfg.Command == "" {
		return adapters.Adapter{}, Info{}, errors.New("no command to run")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.startTimeout())
	defer cancel()
	proc, err := launch(cfg, 0, "the probe process", nil)
	if err != nil {
		return adapters.Adapter{}, Info{}, err
	}
	info, err := handshake(ctx, proc)
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.shutdownWait())
	defer scancel()
	if serr := proc.shutdown(sctx); err == nil && serr != nil {
		err = fmt.Errorf("%w: %w", errHandshake, serr)
	}
	if err != nil {
		return adapters.Adapter{}, Info{}, err
	}
	adapter := adapters.Adapter{
		Name:     adapterName(info.Implementation),
		Declares: info.declares,
		New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
			return newPool(ctx, cfg, info, env)
		},
	}
	return adapter, info, nil
}

// adapterName is the name of the adapter [Probe] returns for an
// implementation: the name it declares in hello, since that, not the way
// it was run, is what a certificate certifies; every report and verdict
// line then names it as a Go adapter's is named. A name that holds
// anything but printable characters (a newline, an escape sequence) is
// quoted, so that it cannot forge or garble the lines that show it.
func adapterName(impl protocol.Implementation) string {
	name := impl.Name
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return strconv.Quote(name)
		}
	}
	return name
}

// launch starts one child process of cfg; the quotes of its stderr mask
// secrets (nil: none).
func launch(cfg Config, instance int, label string, secrets *redact.Redactor) (*process, error) {
	env := append(os.Environ(), "HARMLESS_PROTOCOL="+strconv.Itoa(protocol.Version), "HARMLESS_INSTANCE="+strconv.Itoa(instance))
	env = append(env, cfg.Env...)
	return startProcess(cfg.Command, cfg.Dir, env, label, secrets)
}

// handshake sends hello and checks the answer.
func handshake(ctx context.Context, proc *process) (Info, error) {
	var hello protocol.HelloResult
	err := proc.request(ctx, protocol.MethodHello, protocol.HelloParams{Protocols: protocol.Versions, Harness: version.Harness}, &hello)
	if err != nil {
		return Info{}, fmt.Errorf("%w: %w", errHandshake, err)
	}
	return Info{
		Protocol:       hello.Protocol,
		Implementation: hello.Implementation,
		declares:       hello.Declares,
		MaxInFlight:    hello.MaxInFlight,
	}, nil
}

// request sends one request and decodes the answer's result into result: a
// *protocol.HelloResult, an *adapters.Outcome, an *int64 (purge) or nil. A
// result that breaks the protocol fails the process.
func (p *process) request(ctx context.Context, method string, params, result any) error {
	resp, err := p.call(ctx, method, params)
	if err != nil {
		return err
	}
	if resp.Error != nil {
		return &answerError{Method: method, Err: *resp.Error, Process: p.label}
	}
	switch r := result.(type) {
	case nil:
	case *protocol.HelloResult:
		*r, err = protocol.DecodeHello(resp.Result, protocol.Versions)
	case *adapters.Outcome:
		*r, err = protocol.DecodeOutcome(resp.Result)
	case *int64:
		*r, err = protocol.DecodePurge(resp.Result)
	default:
		panic(fmt.Sprintf("exec: no decoder for %T", result))
	}
	if err != nil {
		p.fail(fmt.Errorf("it answered %s request %d badly: %w", method, resp.ID, err))
		return p.failure()
	}
	return nil
}
