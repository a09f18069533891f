//go:build unix && !linux

package exec

import "syscall"

// sysProcAttr puts the child in its own process group, so it can be killed
// with everything it started.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
