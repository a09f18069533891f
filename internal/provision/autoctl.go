package provision

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Running pg_autoctl: its commands (create, set, perform) and its
// long-lived `pg_autoctl run` supervisors, one per instance.

const (
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
)

// env is pg_autoctl's whole environment. HOME and XDG_* point into the
// formation directory, where pg_autoctl keeps its configuration and state
// (as root without XDG_RUNTIME_DIR it makes a root-owned directory in the
// system's temporary directory that breaks later runs); PATH holds the
// server binaries first and no more than /usr/bin:/bin, or pg_autoctl
// probes root's; PGPASSFILE gives it, and the PostgreSQL it starts, the
// passwords; PGHOST is the formation's socket directory, where the
// monitor's pg_autoctl finds its PostgreSQL.
func (f *formation) env() []string {
	home := f.home()
	return []string{
		"HOME=" + home,
		"XDG_RUNTIME_DIR=" + filepath.Join(home, "run"),
		"XDG_CONFIG_HOME=" + filepath.Join(home, "config"),
		"XDG_DATA_HOME=" + filepath.Join(home, "data"),
		"PATH=" + f.tools.bin + ":/usr/bin:/bin",
		"PGPASSFILE=" + f.pgpass(),
		"PGHOST=" + f.socketDir(),
		"LC_ALL=C",
	}
}

// autoctlCmd prepares pg_autoctl as the server's user, in the formation
// directory (so that every process it starts works there, where
// processesIn finds it), in a process group of its own, its output
// appended to log.
func (f *formation) autoctlCmd(ctx context.Context, log *os.File, args ...string) *exec.Cmd {
	cmd := f.as.command(ctx, f.dir, f.tools.autoctl, args...)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.Env = f.env()
	cmd.Stdout, cmd.Stderr = log, log
	return cmd
}

// openLog opens the log file name in append mode.
func (f *formation) openLog(name string) (*os.File, error) {
	path := f.logFile(name)
	l, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return l, nil
}

// autoctl runs a pg_autoctl command to its end, its output appended to
// <logName>.log. When ctx ends, its whole process group is killed: a
// create starts services of its own. A failure's error ends with the
// log's last lines.
func (f *formation) autoctl(ctx context.Context, logName string, args ...string) error {
	log, err := f.openLog(logName)
	if err != nil {
		return err
	}
	defer log.Close()
	from := fileSize(log.Name())
	cmd := f.autoctlCmd(ctx, log, args...)
	cmd.Cancel = func() error {
		killGroup(cmd.Process.Pid, sigKill)
		return nil
	}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pg_autoctl %s: %w; last lines of %s: %s",
			strings.Join(args[:min(2, len(args))], " "), err, log.Name(), lastLines(readFrom(log.Name(), from), 10))
	}
	return nil
}

// readFrom returns a file from byte offset off (at most 1 MiB).
func readFrom(name string, off int64) string {
	f, err := os.Open(name)
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, 1<<20)
	n, _ := f.ReadAt(b, off)
	return string(b[:n])
}

// autoctlRun is one `pg_autoctl run` process, the supervisor of an
// instance: it starts and watches its PostgreSQL and, for a node, the
// keeper that follows the monitor's orders.
type autoctlRun struct {
	pid   int
	start string        // procStart of pid
	done  chan struct{} // closed once the process is reaped
}

// running reports whether the process is still there; a nil run is not.
func (r *autoctlRun) running() bool {
	if r == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// wait waits until the process is reaped or ctx ends, and reports whether
// it is gone.
func (r *autoctlRun) wait(ctx context.Context) bool {
	if r == nil {
		return true
	}
	select {
	case <-r.done:
		return true
	case <-ctx.Done():
		return false
	}
}

// startRun starts `pg_autoctl run` for in, in a process group of its own
// (so that a hard kill reaches its services, which rename themselves), its
// output appended to <name>.log, and records its pid in the pids file for
// a later run's cleanup. The process outlives ctx: close and the hard kill
// stop it.
func (f *formation) startRun(in *instance) error {
	log, err := f.openLog(in.name)
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own descriptor
	cmd := f.autoctlCmd(context.Background(), log, "run", "--pgdata", in.data)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start pg_autoctl run for %s: %w", in.name, err)
	}
	r := &autoctlRun{pid: cmd.Process.Pid, start: procStart(cmd.Process.Pid), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(r.done)
	}()
	in.run = r
	if err := appendPids(filepath.Join(f.dir, haPidsFile), r.pid, r.start); err != nil {
		return err
	}
	return nil
}

// appendPids records a pg_autoctl run process: "pid start" a line.
func appendPids(path string, pid int, start string) error {
	l, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("record pid: %w", err)
	}
	_, err = fmt.Fprintf(l, "%d %s\n", pid, start)
	if cerr := l.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("record pid: %w", err)
	}
	return nil
}

// recordedRuns reads the pids file of a formation directory.
func recordedRuns(dir string) map[int]string {
	b, err := os.ReadFile(filepath.Join(dir, haPidsFile))
	if err != nil {
		return nil
	}
	runs := map[int]string{}
	for line := range strings.Lines(string(b)) {
		pidS, start, _ := strings.Cut(strings.TrimSpace(line), " ")
		if pid, err := strconv.Atoi(pidS); err == nil && pid > 0 {
			runs[pid] = start
		}
	}
	return runs
}

// hardKill kills an instance as a power cut would: SIGKILL to its
// pg_autoctl's process group first, so that nothing restarts PostgreSQL,
// then to its postmaster and every process working in its PGDATA, which
// sit in sessions of their own, again until none is left. It does not
// wait for a clean stop: PostgreSQL recovers from the crash when the
// instance runs again. It returns how many PostgreSQL processes it found.
func (f *formation) hardKill(ctx context.Context, in *instance) (int, error) {
	victims := len(processesIn(in.data, f.as.serverUID()))
	if in.run != nil {
		killGroup(in.run.pid, sigKill)
	}
	if left := killAllIn(ctx, in.data, f.as.serverUID(), []string{in.data}, haKillTimeout); len(left) > 0 {
		return victims, fmt.Errorf("processes %v of %s survive SIGKILL", left, in.name)
	}
	wait, cancel := context.WithTimeout(context.WithoutCancel(ctx), haKillTimeout)
	defer cancel()
	if !in.run.wait(wait) {
		return victims, fmt.Errorf("pg_autoctl run of %s (pid %d) survives SIGKILL", in.name, in.run.pid)
	}
	return victims, nil
}
