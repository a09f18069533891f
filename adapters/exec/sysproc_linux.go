package exec

import "syscall"

// sysProcAttr puts the child in its own process group, so it can be killed
// with everything it started, and kills it if the harness dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
