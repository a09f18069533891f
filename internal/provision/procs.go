package provision

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Finding and killing the processes of a directory: what an HA formation
// needs because its processes do not form one tree. `pg_autoctl run`
// starts services that rename themselves ("pg_autoctl: start/stop
// postgres") and PostgreSQL, whose every child calls setsid, so that each
// sits in a session of its own; when the postmaster dies, its children are
// reparented to init, where nothing links them to the formation any more
// but their working directory: the postmaster changes to its data
// directory and its children inherit it. A process's working directory and
// command line are therefore what this file looks at; pids alone could
// name a process that reused them.

// alive reports whether pid is a live process: a zombie (exited, not yet
// reaped, which happens to the orphans of a killed postmaster where init
// does not reap) is not.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	return state != 'Z' && state != 'X'
}

// within reports whether path is dir or lies inside it. A working
// directory removed under a process reads "<path> (deleted)".
func within(path, dir string) bool {
	path = strings.TrimSuffix(path, " (deleted)")
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}

// serverPrograms are the programs a formation runs, by the name the
// kernel keeps for them (/proc/PID/comm), which a new process title does
// not change.
var serverPrograms = []string{"postgres", "pg_autoctl", "pg_ctl", "pg_basebackup", "pg_rewind", "initdb", "pg_controldata"}

// processesIn returns the live processes of uid, other than this one, that
// run one of serverPrograms with a working directory of dir or below it,
// or with a command line naming dir (a postmaster's -D, `pg_autoctl run
// --pgdata`). The user and the program keep a shell of someone who is
// looking around in the directory out of it. Processes this user may not
// inspect are not seen: as root, every one is.
func processesIn(dir string, uid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		// /proc/PID belongs to the process's effective user.
		fi, err := os.Stat(filepath.Join("/proc", e.Name()))
		if err != nil || int(fi.Sys().(*syscall.Stat_t).Uid) != uid {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if !slices.Contains(serverPrograms, strings.TrimSpace(string(comm))) {
			continue
		}
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
		mentions := cwd != "" && within(cwd, dir)
		if !mentions {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			mentions = namesPath(cmdline, dir)
		}
		if mentions && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// namesPath reports whether a command line (arguments separated by NUL
// bytes) names dir or a path inside it, and not merely a longer name that
// starts like it (harmless-ha-1-23 is not harmless-ha-1-2).
func namesPath(cmdline []byte, dir string) bool {
	for arg := range bytes.SplitSeq(cmdline, []byte{0}) {
		if i := bytes.Index(arg, []byte(dir)); i >= 0 && within(string(arg[i:]), dir) {
			return true
		}
	}
	return false
}

// postmasterOf returns the pid in the first line of data/postmaster.pid
// when that process is alive and works in data, so that a stale file whose
// pid was reused never names a stranger; 0 otherwise.
func postmasterOf(data string) int {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || !alive(pid) {
		return 0
	}
	if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err != nil || !within(cwd, data) {
		return 0
	}
	return pid
}

// killGroup sends sig to the process group pgid and to pgid itself, which
// may have left its group; a group or process already gone is no error.
func killGroup(pgid int, sig syscall.Signal) {
	if pgid <= 0 {
		return
	}
	_ = syscall.Kill(-pgid, sig)
	_ = syscall.Kill(pgid, sig)
}

// killAllIn sends SIGKILL to every process of dir (processesIn) and of the
// postmasters of the data directories given, and to their process groups,
// again and again until none is left or timeout passes: a supervisor
// killed in the same sweep may have forked once more. It returns the pids
// still alive at the end.
func killAllIn(ctx context.Context, dir string, uid int, datas []string, timeout time.Duration) []int {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		pids := processesIn(dir, uid)
		for _, data := range datas {
			if pm := postmasterOf(data); pm != 0 && !slices.Contains(pids, pm) {
				pids = append(pids, pm)
			}
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			killGroup(pid, syscall.SIGKILL)
		}
		select {
		case <-ctx.Done():
			var left []int
			for _, pid := range pids {
				if alive(pid) {
					left = append(left, pid)
				}
			}
			return left
		case <-tick.C:
		}
	}
}

// signalIfSame sends sig to pid if it is still the process that started
// at start (procStart), so that a recorded pid reused by a stranger is
// left alone. A process already gone is no error.
func signalIfSame(pid int, start string, sig syscall.Signal) error {
	if start != "" && procStart(pid) != start {
		return nil
	}
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to process %d: %w", sig, pid, err)
	}
	return nil
}
