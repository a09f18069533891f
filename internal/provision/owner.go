package provision

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// owner identifies the process that created a container or a cluster, so
// that a later run can tell leftovers of a dead run from servers in use.
type owner struct {
	pid int
	// start is the process start time in clock ticks since boot (field 22
	// of /proc/PID/stat), to tell a reused pid apart; "" where unknown.
	start string
	host  string
}

// Label keys put on every container this package starts.
const (
	labelOwnerPID   = "dev.harmless.owner-pid"
	labelOwnerStart = "dev.harmless.owner-start"
	labelOwnerHost  = "dev.harmless.owner-host"
)

func self() owner {
	host, _ := os.Hostname()
	return owner{pid: os.Getpid(), start: procStart(os.Getpid()), host: host}
}

// procStart returns the start time of process pid, or "" where /proc does
// not tell.
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state), so field 22 is fields[19].
	if len(fields) < 20 {
		return ""
	}
	return fields[19]
}

// dead reports whether the owner is known to be gone. An owner on another
// host, or one that cannot be checked, is assumed alive: leftovers are only
// removed when that is certainly safe.
func (o owner) dead() bool {
	if o.pid <= 0 {
		return false
	}
	if host, _ := os.Hostname(); o.host != "" && o.host != host {
		return false
	}
	err := syscall.Kill(o.pid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return true
	}
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// The pid is in use; by the same process only if it started at the
	// same time.
	if o.start != "" {
		if now := procStart(o.pid); now != "" && now != o.start {
			return true
		}
	}
	return false
}

func (o owner) labels() map[string]string {
	return map[string]string{
		labelOwnerPID:   strconv.Itoa(o.pid),
		labelOwnerStart: o.start,
		labelOwnerHost:  o.host,
	}
}

func ownerFromLabels(l map[string]string) owner {
	pid, _ := strconv.Atoi(l[labelOwnerPID])
	return owner{pid: pid, start: l[labelOwnerStart], host: l[labelOwnerHost]}
}

// marshal and parseOwner are the owner file of a cluster directory:
// key=value lines.
func (o owner) marshal() []byte {
	return fmt.Appendf(nil, "pid=%d\nstart=%s\nhost=%s\n", o.pid, o.start, o.host)
}

func parseOwner(b []byte) owner {
	var o owner
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		switch k {
		case "pid":
			o.pid, _ = strconv.Atoi(v)
		case "start":
			o.start = v
		case "host":
			o.host = v
		}
	}
	return o
}
