package exec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/harmless-dev/harmless/adapters/exec/protocol"
	"github.com/harmless-dev/harmless/internal/redact"
)

// errProcessFailed marks a request that failed because its child process
// crashed, broke the protocol or stopped reading its input. Every later
// request to that process fails with the same cause; the instance replaces
// the process and lists the failure among its crashes.
var errProcessFailed = errors.New("implementation process failed")

// errNoAnswer marks a request the child did not answer in time.
var errNoAnswer = errors.New("no answer from the implementation")

// exitGrace is how long a process that has closed its stdout may take to
// exit (and one that has exited may take to close its stdout) before it
// counts as failed without the other half of the evidence.
const exitGrace = 500 * time.Millisecond

// process is one running child: it sends requests, matches answers by id and
// records how the child failed, if it did.
type process struct {
	label     string    // "process 3 of instance 1", for messages
	startedAt time.Time // when it was started
	cmd       *osexec.Cmd
	stdin     *os.File
	stderr    *stderrQuote

	writeMu sync.Mutex // one line at a time on stdin

	mu        sync.Mutex
	nextID    uint64
	pending   map[uint64]chan protocol.Response
	abandoned map[uint64]bool // ids whose caller gave up; a late answer is dropped
	err       error           // why the process failed; set once
	failedAt  time.Time       // when err was set

	failed     chan struct{} // closed when err is set
	exited     chan struct{} // closed when the process has been waited for
	status     string        // exit status, once exited
	exitedOK   bool          // whether it exited with status 0, once exited
	stderrDone chan struct{} // closed when stderr has been read to its end
}

// startProcess starts command as a child with its own process group.
func startProcess(command, dir string, env []string, label string, secrets *redact.Redactor) (*process, error) {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", label, err)
	}
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, fmt.Errorf("start %s: %w", label, err)
	}
	p := &process{
		label:      label,
		startedAt:  time.Now(),
		stdin:      stdinW,
		stderr:     newStderrQuote(secrets),
		pending:    map[uint64]chan protocol.Response{},
		abandoned:  map[uint64]bool{},
		failed:     make(chan struct{}),
		exited:     make(chan struct{}),
		stderrDone: make(chan struct{}),
	}
	p.cmd = osexec.Command("/bin/sh", "-c", command)
	p.cmd.Dir = dir
	p.cmd.Env = env
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		for _, f := range []*os.File{stdinR, stdinW, stdoutR, stdoutW} {
			f.Close()
		}
		return nil, fmt.Errorf("start %s: %w", label, err)
	}
	// Files, not writers, so that Wait returns when the child exits even if
	// a grandchild keeps its output open.
	p.cmd.Stdin = stdinR
	p.cmd.Stdout = stdoutW
	p.cmd.Stderr = stderrW
	p.cmd.SysProcAttr = sysProcAttr()
	err = p.cmd.Start()
	// The child owns its ends now; ours are closed so EOF is seen.
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stdinW.Close()
		stdoutR.Close()
		stderrR.Close()
		return nil, fmt.Errorf("start %s: %w", label, err)
	}
	go func() {
		defer close(p.stderrDone)
		defer stderrR.Close()
		_, _ = io.Copy(p.stderr, stderrR)
	}()
	go p.read(stdoutR)
	go p.wait()
	return p, nil
}

// read matches answers to requests until stdout ends or breaks the protocol.
func (p *process) read(stdout *os.File) {
	defer stdout.Close()
	lines := protocol.NewLineReader(stdout, protocol.MaxAnswerBytes)
	for {
		line, err := lines.Next()
		if errors.Is(err, io.EOF) {
			p.lostOutput("closed its stdout")
			return
		}
		if err != nil {
			p.fail(fmt.Errorf("its stdout broke the protocol: %w", err))
			return
		}
		resp, err := protocol.DecodeResponse(line)
		if err != nil {
			p.fail(fmt.Errorf("it sent a malformed answer: %w", err))
			return
		}
		if !p.route(resp) {
			p.fail(fmt.Errorf("%w: it answered request %d, which was never sent or was already answered", protocol.ErrViolation, resp.ID))
			return
		}
	}
}

// route hands resp to its caller; it reports false for an unexpected id.
func (p *process) route(resp protocol.Response) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.abandoned[resp.ID] {
		delete(p.abandoned, resp.ID)
		return true
	}
	ch, ok := p.pending[resp.ID]
	if !ok {
		return false
	}
	delete(p.pending, resp.ID)
	ch <- resp // buffered: never blocks
	return true
}

// lostOutput handles the end of stdout. The exit status, when it comes
// soon, goes into the message.
func (p *process) lostOutput(what string) {
	select {
	case <-p.exited:
		p.fail(fmt.Errorf("it %s and exited (%s)", what, p.status))
	case <-time.After(exitGrace):
		p.fail(fmt.Errorf("it %s but is still running", what))
	}
}

// wait reaps the child. If it exited and its stdout stays open (a grandchild
// holds it), that is a failure too.
func (p *process) wait() {
	err := p.cmd.Wait()
	p.status, p.exitedOK = exitStatus(err), err == nil
	close(p.exited)
	select {
	case <-p.failed:
	case <-time.After(exitGrace):
		p.fail(fmt.Errorf("it exited (%s)", p.status))
	}
}

func exitStatus(err error) string {
	var exit *osexec.ExitError
	switch {
	case err == nil:
		return "exit status 0"
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by signal " + ws.Signal().String()
		}
		return "exit status " + strconv.Itoa(exit.ExitCode())
	default:
		return err.Error()
	}
}

// fail records why the process failed, kills it, and wakes every caller.
func (p *process) fail(cause error) {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return
	}
	p.err, p.failedAt = cause, time.Now()
	close(p.failed)
	p.mu.Unlock()
	p.kill()
}

// kill kills the child's whole process group.
func (p *process) kill() {
	if p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// harnessKill is the cause of a failure the harness brought about on
// purpose, by killing the process: the child did not crash, and the pool
// does not count it among the instance's crashes.
type harnessKill string

func (k harnessKill) Error() string { return string(k) }

// The harness's reasons to kill a process.
const (
	// errAborted: [pool.Abort] stops the instance as a crash would.
	errAborted harnessKill = "the harness killed it with SIGKILL (abort), as a crash would"
	// errClosing: Close does not wait for a process that is still starting.
	errClosing harnessKill = "the harness killed it because the instance was closed while it was starting"
	// errStartDeadline: a process that has not answered hello and setup by
	// the deadline of the request that needed it is of no use; it is
	// killed rather than asked to shut down, which it would not answer
	// either.
	errStartDeadline harnessKill = "the harness killed it because it had not completed hello and setup by the deadline"
	// errCutLine: a child that stopped reading in the middle of a request
	// line has hung; the rest of the line cannot be sent later without
	// corrupting the stream, so the process cannot be used again.
	errCutLine harnessKill = "the harness killed it because it stopped reading its stdin in the middle of a request line until the deadline"
)

// crashed reports whether the process failed by itself (it exited, broke
// the protocol or stopped reading), not because the harness killed it.
func (p *process) crashed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	var k harnessKill
	return p.err != nil && !errors.As(p.err, &k)
}

// crashReport describes the process's failure on one line: its label,
// when and how it failed, and the start of its stderr's last crash report
// (see [stderrQuote.Excerpt]), with the DSN's secrets masked, also in a
// stray stdout line the cause may quote.
func (p *process) crashReport() string {
	p.mu.Lock()
	cause, at := p.err, p.failedAt
	p.mu.Unlock()
	text := fmt.Sprintf("%s failed at %s: %v%s", p.label, at.UTC().Format(crashTime), cause, p.stderr.Excerpt())
	return p.stderr.secrets.String(text)
}

// crashTime is how a crash report gives its time: UTC, to the millisecond.
const crashTime = "2006-01-02T15:04:05.000Z"

// stop kills the process group without waiting, for reason.
func (p *process) stop(reason harnessKill) {
	p.fail(reason) // kills the group, unless the process had failed already
	p.kill()       // and its stray grandchildren, in that case
}

// awaitExit waits until the child has exited or ctx ends.
func (p *process) awaitExit(ctx context.Context) error {
	select {
	case <-p.exited:
		p.stdin.Close()
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s was killed but had not exited when the wait ended: %w", p.label, context.Cause(ctx))
	}
}

// failure is the error a caller gets once the process has failed. It waits
// a moment for the rest of stderr, which often says why.
func (p *process) failure() error {
	select {
	case <-p.stderrDone:
	case <-time.After(exitGrace):
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Errorf("%w: %s: %w%s", errProcessFailed, p.label, p.err, p.stderr.Summary())
}

// call sends one request and waits for its answer, until ctx ends.
func (p *process) call(ctx context.Context, method string, params any) (protocol.Response, error) {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return protocol.Response{}, p.failure()
	}
	p.nextID++
	id := p.nextID
	ch := make(chan protocol.Response, 1)
	p.pending[id] = ch
	p.mu.Unlock()

	line, err := protocol.EncodeRequest(id, method, params)
	if err == nil {
		err = p.write(ctx, line)
	}
	if err != nil {
		p.forget(id, false)
		return protocol.Response{}, fmt.Errorf("send %s request %d to %s: %w", method, id, p.label, err)
	}
	select {
	case resp := <-ch:
		return resp, nil
	case <-p.failed:
		// An answer routed just before the failure still counts.
		select {
		case resp := <-ch:
			return resp, nil
		default:
		}
		return protocol.Response{}, p.failure()
	case <-ctx.Done():
		p.forget(id, true)
		// An answer that raced the deadline still counts.
		select {
		case resp := <-ch:
			return resp, nil
		default:
		}
		return protocol.Response{}, fmt.Errorf("%w: %s request %d to %s: %w%s", errNoAnswer, method, id, p.label, context.Cause(ctx), p.stderr.Summary())
	}
}

// forget stops waiting for id; a late answer is dropped when abandon is set.
func (p *process) forget(id uint64, abandon bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.pending[id]; ok {
		delete(p.pending, id)
		if abandon {
			p.abandoned[id] = true
		}
	}
}

// write sends one line. A child that does not read its stdin until ctx ends
// has hung; a partly written line corrupts the stream, so it fails the
// process.
func (p *process) write(ctx context.Context, line []byte) error {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	deadline, _ := ctx.Deadline() // none: the zero time, no deadline
	if err := p.stdin.SetWriteDeadline(deadline); err != nil {
		return err
	}
	n, err := p.stdin.Write(line)
	switch {
	case err == nil:
		return nil
	case n == 0 && errors.Is(err, os.ErrDeadlineExceeded):
		// Nothing was written, so the stream is intact; the child is only
		// slow, as a hung Deliver would be.
		return fmt.Errorf("%w: it stopped reading its stdin: %w", errNoAnswer, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		p.fail(fmt.Errorf("%w: %w", errCutLine, err))
	case errors.Is(err, syscall.EPIPE):
		// The child closed its stdin, most likely by exiting: say how.
		select {
		case <-p.exited:
			p.fail(fmt.Errorf("it exited (%s) before it read a request", p.status))
		case <-time.After(exitGrace):
			p.fail(fmt.Errorf("it closed its stdin: %w", err))
		}
	default:
		p.fail(fmt.Errorf("it stopped reading its stdin: %w", err))
	}
	return p.failure()
}

// shutdown asks the child to exit, closes its stdin and waits for it to exit
// until ctx ends; then it kills the process group. It reports an error when
// the child answered shutdown with an error, exited with a failure status or
// had to be killed.
func (p *process) shutdown(ctx context.Context) error {
	p.mu.Lock()
	alreadyFailed := p.err != nil
	p.mu.Unlock()
	defer p.kill() // stray grandchildren go with the group, in every case
	if alreadyFailed {
		p.stdin.Close()
		return nil // its failure was reported by the requests it failed
	}
	var answer error
	resp, err := p.call(ctx, protocol.MethodShutdown, struct{}{})
	switch {
	case err != nil:
		answer = err
	case resp.Error != nil:
		answer = fmt.Errorf("shutdown answered %w", resp.Error)
	}
	p.stdin.Close()
	select {
	case <-p.exited:
		if p.exitedOK && errors.Is(answer, errProcessFailed) {
			answer = nil // it exited cleanly without answering: close enough
		}
		if answer == nil && !p.exitedOK {
			answer = fmt.Errorf("it exited with %s%s", p.status, p.stderr.Summary())
		}
		if answer != nil {
			return fmt.Errorf("shut down %s: %w", p.label, answer)
		}
		return nil
	case <-ctx.Done():
		p.kill()
		return fmt.Errorf("%s did not exit after shutdown (%v) and was killed%s", p.label, answerOrNil(answer), p.stderr.Summary())
	}
}

func answerOrNil(err error) string {
	if err == nil {
		return "it answered"
	}
	return err.Error()
}
