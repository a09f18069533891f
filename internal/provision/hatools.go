package provision

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What an HA formation needs installed: pg_autoctl, and server binaries of
// a major version for which the pgautofailover extension is installed.
// Debian splits them: pg-auto-failover-cli has pg_autoctl,
// postgresql-<major>-auto-failover the extension.

// defaultAutoctl is where Debian's pg-auto-failover-cli puts pg_autoctl;
// it is looked for there when it is not on PATH.
const defaultAutoctl = "/usr/bin/pg_autoctl"

// extensionControl is the file that says the extension is installed, in
// the extension directory of a server's share directory.
const extensionControl = "pgautofailover.control"

// haTools are the programs a formation is made with.
type haTools struct {
	autoctl string // pg_autoctl
	bin     string // the server binaries: initdb, pg_ctl, postgres
}

// errNoAutoctl says what to install when pg_autoctl is missing.
var errNoAutoctl = errors.New("pg_autoctl not found: install Debian's pg-auto-failover-cli and postgresql-15-auto-failover")

// haWhere describes the HA way for Open's error.
const haWhere = "an HA formation (pg_auto_failover, --provision ha)"

// findHATools finds pg_autoctl on PATH or at defaultAutoctl, and server
// binaries (as the cluster way finds them) whose major version has the
// extension installed: the newest such, so that a machine with PostgreSQL
// 17 and the extension for 15 only still gets 15.
func findHATools(ctx context.Context, st settings) (haTools, error) {
	autoctl := ""
	for _, dir := range append(filepath.SplitList(st.path), filepath.Dir(defaultAutoctl)) {
		if p := filepath.Join(dir, "pg_autoctl"); dir != "" && isExecutable(p) {
			autoctl = p
			break
		}
	}
	if autoctl == "" {
		return haTools{}, errNoAutoctl
	}
	var candidates []string
	if st.binDir != "" {
		candidates = []string{st.binDir}
	} else {
		system, _ := filepath.Glob(systemBinGlob)
		slices.SortFunc(system, func(a, b string) int { return majorOf(b) - majorOf(a) })
		candidates = append(filepath.SplitList(st.path), system...)
	}
	var looked []string
	for _, dir := range candidates {
		if dir == "" || !hasServerBinaries(dir) || slices.Contains(looked, dir) {
			continue
		}
		looked = append(looked, dir)
		if extensionInstalled(ctx, dir) {
			return haTools{autoctl: autoctl, bin: dir}, nil
		}
	}
	if len(looked) == 0 {
		return haTools{}, fmt.Errorf("%s: not found", st.binariesWhere())
	}
	var where []string
	for _, dir := range looked {
		where = append(where, fmt.Sprintf("%s (%s)", dir, strings.Join(shareDirs(ctx, dir), ", ")))
	}
	return haTools{}, fmt.Errorf("the pgautofailover extension is not installed for the server binaries found: no extension/%s under the share directory of %s: install postgresql-<major>-auto-failover for their major version",
		extensionControl, strings.Join(where, "; "))
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// shareDirs returns where the server binaries of bin look for extensions:
// what their pg_config says, and Debian's /usr/share/postgresql/<major>
// for a bin directory /usr/lib/postgresql/<major>/bin.
func shareDirs(ctx context.Context, bin string) []string {
	var dirs []string
	if pgConfig := filepath.Join(bin, "pg_config"); isExecutable(pgConfig) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, pgConfig, "--sharedir").Output(); err == nil {
			if d := strings.TrimSpace(string(out)); d != "" {
				dirs = append(dirs, d)
			}
		}
	}
	if major := majorOf(bin); major > 0 {
		if d := "/usr/share/postgresql/" + strconv.Itoa(major); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// extensionInstalled reports whether the pgautofailover extension is
// installed for the server binaries of bin.
func extensionInstalled(ctx context.Context, bin string) bool {
	for _, d := range shareDirs(ctx, bin) {
		if _, err := os.Stat(filepath.Join(d, "extension", extensionControl)); err == nil {
			return true
		}
	}
	return false
}
