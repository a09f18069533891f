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
	"github.com/harmless-dev/harmless/internal/shortdur"
)

// errProcessFailed marks a request that failed because its child process
// crashed, broke the protocol or stopped reading its input. Every later
// request to that process fails with the same cause; the instance replaces
// the process and lists the failure among its crashes.
var errProcessFailed = errors.New("implementation process failed")

// errNoAnswer marks a request the child did not answer in time.
var errNoAnswer = errors.New("no answer from the implementation")

// wedges reports whether a request with method that is not answered by
// its deadline shows the process wedged, so that it is killed with its
// process group, replaced and counted as a crash (see [process.wedged]).
// A consumer whose supervisor sees it stuck on one message is restarted;
// left alive, a child stuck on one request would make every later request
// to it wait for the whole deadline too, for the rest of the run. Only
// deliver and purge count: they are bounded by the delivery timeout,
// which is the child's to meet. A process that has not answered hello or
// setup by its deadline is stopped without counting as a crash (see
// errStartDeadline); drain waits for the destination, which the harness
// may hold on purpose, for a bound of the harness's own; shutdown kills
// the process when it is not answered.
func wedges(method string) bool {
	return method == protocol.MethodDeliver || method == protocol.MethodPurge
}

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

	// writing holds a token while a line is written to stdin: one line at
	// a time, and a caller waits for its turn only until its deadline.
	writing chan struct{}

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
	outputDone chan struct{} // closed when stdout has been read to its end
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
		writing:    make(chan struct{}, 1),
		failed:     make(chan struct{}),
		exited:     make(chan struct{}),
		outputDone: make(chan struct{}),
		stderrDone: make(chan struct{}),
	}
	p.cmd = osexec.Command("/bin/sh", "-c", shellScript(command))
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
	// a grandchild keeps its output open. The shell's own stdin and stdout
	// are /dev/null: it hands the pipes, as descriptors 3 and 4, to the
	// command alone (see shellScript).
	p.cmd.ExtraFiles = []*os.File{stdinR, stdoutW}
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

// shellScript is the /bin/sh script that runs command with the pipes of
// the protocol, handed to the shell as descriptors 3 (stdin's read end)
// and 4 (stdout's write end), so that no process but the command's holds
// them. A shell that runs a command as its child keeps its own stdin and
// stdout open while it waits for it, and dash, Debian's /bin/sh, does so
// even for a simple command given with -c, where bash would exec it
// instead: a child that closed its stdout, or its stdin, would then not
// be seen to, since the shell's copy keeps the pipe open, and its requests
// would wait for their deadlines. So the command runs in an asynchronous
// list, in a subshell that takes the pipes as its stdin and stdout, closes
// the descriptors they came on, and execs the command's last simple
// command, as a subshell does; the shell closes its copies and waits for
// the list, exiting with its status. A command whose processes stay under
// a shell of their own (a pipeline, a command followed by another) is not
// helped: a wedged request then ends it at its deadline (see [wedges]).
// An asynchronous list ignores SIGINT and SIGQUIT, which the harness never
// sends; its stdin would be /dev/null but for the redirection. The
// newlines around command end a comment or here-document at its end.
func shellScript(command string) string {
	return "{ exec <&3 >&4 3<&- 4>&-\n" + command + "\n} &\nexec 3<&- 4>&-\nwait $!\n"
}

// read matches answers to requests until stdout ends or breaks the
// protocol; then it reads stdout to its end, which comes when every
// process holding it has closed it, exiting if killed (see
// [process.awaitExit]).
func (p *process) read(stdout *os.File) {
	defer close(p.outputDone)
	defer stdout.Close()
	defer func() {
		// After a failure, the kill ends stdout at once; a stray holder
		// outside the group is not waited for beyond a moment.
		_ = stdout.SetReadDeadline(time.Now().Add(exitGrace))
		_, _ = io.Copy(io.Discard, stdout)
	}()
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
	// errCutLine: a child that stopped reading in the middle of the line of
	// a hello, setup, drain or shutdown has hung; the rest of the line
	// cannot be sent later without corrupting the stream, so the process
	// cannot be used again. (One that stops reading a deliver or purge is
	// wedged: a crash, see [process.wedged].)
	errCutLine harnessKill = "the harness killed it because it stopped reading its stdin in the middle of a request line until the deadline"
)

// crashed reports whether the process failed by itself (it exited, broke
// the protocol, stopped reading or was wedged), not because the harness
// killed it for a reason of its own.
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

// awaitExit waits until the child has exited or ctx ends. The process the
// harness started is the shell that runs the command (see shellScript),
// and the command's process is its child: killed with it, it may still be
// exiting when the shell has been reaped. So awaitExit also waits, for a
// moment at most, until the command's stdout and stderr have been read to
// their ends, which comes when it has closed its descriptors as it exits,
// its connections with them: what it held is gone when awaitExit returns.
// A stray process outside the group that holds them open is not waited
// for beyond that moment.
func (p *process) awaitExit(ctx context.Context) error {
	select {
	case <-p.exited:
	case <-ctx.Done():
		return fmt.Errorf("%s was killed but had not exited when the wait ended: %w", p.label, context.Cause(ctx))
	}
	p.stdin.Close()
	grace := time.NewTimer(exitGrace)
	defer grace.Stop()
	for _, done := range []chan struct{}{p.outputDone, p.stderrDone} {
		select {
		case <-done:
		case <-grace.C:
			return nil
		case <-ctx.Done():
			return nil // it has exited; its descriptors will follow
		}
	}
	return nil
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

// request names one request to the process, for messages, and says when
// it was sent, to tell how long the child had to answer it.
type request struct {
	method string
	id     uint64
	sent   time.Time
}

// String names the request as messages do: "deliver request 7".
func (r request) String() string { return fmt.Sprintf("%s request %d", r.method, r.id) }

// call sends one request and waits for its answer, until ctx ends. A
// deliver or purge that gets no answer by its deadline kills the process
// (see [process.wedged]); the requests it had in flight then fail as for a
// crash.
func (p *process) call(ctx context.Context, method string, params any) (protocol.Response, error) {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return protocol.Response{}, p.failure()
	}
	p.nextID++
	req := request{method: method, id: p.nextID, sent: time.Now()}
	ch := make(chan protocol.Response, 1)
	p.pending[req.id] = ch
	p.mu.Unlock()

	line, err := protocol.EncodeRequest(req.id, method, params)
	if err == nil {
		err = p.write(ctx, req, line)
	}
	if err != nil {
		p.forget(req.id, false)
		return protocol.Response{}, fmt.Errorf("send %s to %s: %w", req, p.label, err)
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
		p.forget(req.id, true)
		// An answer that raced the deadline still counts.
		select {
		case resp := <-ch:
			return resp, nil
		default:
		}
		var killed string
		if p.wedged(ctx, req, "no answer to "+req.String()) {
			killed = "; " + wedgeKill
		}
		return protocol.Response{}, fmt.Errorf("%w: %s to %s: %w%s%s", errNoAnswer, req, p.label, context.Cause(ctx), killed, p.stderr.Summary())
	}
}

// wedgeKill says, in the error of a request that found its process wedged,
// what became of the process.
const wedgeKill = "the process was killed with its process group, counts as a crash, and a new one replaces it"

// wedged fails the process, which did not answer or read req until ctx
// ended (how says which), when that shows it wedged: req is a deliver or
// purge (see [wedges]) and ctx ended at its deadline, not because the
// caller gave up, which says nothing of the child. The process is killed
// with its process group, so that no later request waits on it; the pool
// replaces it and lists the failure among the instance's crashes. wedged
// reports whether it failed the process.
func (p *process) wedged(ctx context.Context, req request, how string) bool {
	deadline, ok := ctx.Deadline()
	if !wedges(req.method) || !ok || errors.Is(ctx.Err(), context.Canceled) || time.Now().Before(deadline) {
		return false
	}
	if begun, ok := ctx.Value(begunKey{}).(time.Time); ok && deadline.Sub(req.sent) < deadline.Sub(begun)/2 {
		// The pool spent most of the caller's time finding the request a
		// process (starting one, waiting for a slot): the child had too
		// little of it to be judged. If it is wedged, the next request,
		// sent in time, finds out.
		return false
	}
	allowed := deadline.Sub(req.sent).Round(10 * time.Millisecond)
	p.fail(fmt.Errorf("%s within %s: killed with its process group and replaced", how, shortdur.Format(allowed)))
	return true
}

// begunKey is the key of the time, in a request's context, when its
// caller began to wait for it, before the pool found it a process (see
// [withBegun]).
type begunKey struct{}

// withBegun notes in ctx that its caller begins to wait now, unless an
// earlier caller did: a request sent with less than half of its caller's
// time left does not make its process wedged (see [process.wedged]).
func withBegun(ctx context.Context) context.Context {
	if _, ok := ctx.Value(begunKey{}).(time.Time); ok {
		return ctx
	}
	return context.WithValue(ctx, begunKey{}, time.Now())
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

// write sends req's line, waiting for its turn and then for the child to
// read it until ctx's deadline. A child that does not read its stdin by
// the deadline of a deliver or purge is wedged, and killed (see
// [process.wedged]). For the other requests, a line not written at all
// leaves the stream intact: the request is only unanswered, as a hung
// Deliver would be; a partly written line corrupts the stream, so it fails
// the process.
func (p *process) write(ctx context.Context, req request, line []byte) error {
	select {
	case p.writing <- struct{}{}:
	case <-p.failed:
		return p.failure()
	case <-ctx.Done():
		how := fmt.Sprintf("it stopped reading its stdin: %s waited for an earlier line to be written", req)
		if p.wedged(ctx, req, how) {
			return fmt.Errorf("%w: %s until the deadline; %s: %w", errNoAnswer, how, wedgeKill, context.Cause(ctx))
		}
		return fmt.Errorf("%w: it waited for an earlier line to be written to stdin: %w", errNoAnswer, context.Cause(ctx))
	}
	defer func() { <-p.writing }()
	select {
	case <-p.failed: // while this request waited for its turn
		return p.failure()
	default:
	}
	deadline, _ := ctx.Deadline() // none: the zero time, no deadline
	if err := p.stdin.SetWriteDeadline(deadline); err != nil {
		return fmt.Errorf("set the deadline of the write to stdin: %w", err)
	}
	n, err := p.stdin.Write(line)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		how := fmt.Sprintf("it stopped reading its stdin: %s was not written", req)
		if n > 0 {
			how = fmt.Sprintf("it stopped reading its stdin in the middle of %s (%d of its %d bytes written)", req, n, len(line))
		}
		switch {
		case p.wedged(ctx, req, how):
			return fmt.Errorf("%w: %s until the deadline; %s: %w", errNoAnswer, how, wedgeKill, err)
		case n == 0:
			// Nothing was written, so the stream is intact.
			return fmt.Errorf("%w: it stopped reading its stdin: %w", errNoAnswer, err)
		}
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
