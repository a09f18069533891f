// Package provenance finds the build of the running harness, which every
// certificate records (certificate.HarnessInfo): the harness writes it, a
// certificate reader only reads it.
package provenance

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/harmless-dev/harmless/suite/certificate"
)

// Harness returns the build of the running harness. Its commit is the VCS
// revision Go stamped into the binary, with "-dirty" appended when the
// working tree had changes; without a revision (go install of a released
// version, or a build with -buildvcs=false) it is the module's version,
// unless that is "(devel)"; else "unknown". When the harness is a
// dependency of the module under test (suite.Run in another module's
// tests), the main module's revision is not the harness's: the commit is
// then the version of the harness's module in the build, or "unknown".
//
// A build without a stamp is what go run and go test make (they pass
// -buildvcs=false in effect), and what a replace directive to a local
// checkout gives a module under test; the commit is then asked of git in
// the harness module's directory, found from this file's path in the
// build, when that directory still holds the module: `git rev-parse HEAD`,
// with "-dirty" when `git status --porcelain` lists anything. That is the
// checkout as it is now, exact under go run, which builds from it.
func Harness() certificate.HarnessInfo { return harness() }

var harness = sync.OnceValue(func() certificate.HarnessInfo {
	info, _ := debug.ReadBuildInfo() // nil when it cannot be read
	commit, source := buildCommit(info)
	if commit == unknownCommit {
		if dir := moduleDir(); dir != "" {
			if c, err := gitCommit(dir); err == nil {
				return certificate.HarnessInfo{Commit: c, CommitSource: "git in " + dir}
			}
		}
		return certificate.HarnessInfo{Commit: commit}
	}
	return certificate.HarnessInfo{Commit: commit, CommitSource: source}
})

const unknownCommit = "unknown"

// moduleDir returns the directory of the harness's module as this file's
// path in the build names it, or "" when that is not the module's (a
// -trimpath build, a binary moved to another machine).
func moduleDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	dir := filepath.Dir(filepath.Dir(filepath.Dir(file))) // .../internal/provenance/provenance.go
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil || !bytes.Contains(data, []byte("module "+modulePath+"\n")) {
		return ""
	}
	return dir
}

// gitCommit asks git for the commit checked out in dir, with "-dirty"
// when the working tree has changes, as Go's own stamp says it.
func gitCommit(dir string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	head, err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse HEAD in %s: %w", dir, err)
	}
	status, err := exec.CommandContext(ctx, "git", "-C", dir, "status", "--porcelain").Output()
	if err != nil {
		return "", fmt.Errorf("git status in %s: %w", dir, err)
	}
	commit := strings.TrimSpace(string(head))
	if len(bytes.TrimSpace(status)) > 0 {
		commit += "-dirty"
	}
	return commit, nil
}

// modulePath is the harness's module path.
var modulePath = strings.TrimSuffix(reflect.TypeFor[marker]().PkgPath(), "/internal/provenance")

// marker is a type of this package, whose path names the module.
type marker struct{}

// buildCommit finds the harness's commit in info (see [Harness]), and
// where it found it; nil info means none could be read.
func buildCommit(info *debug.BuildInfo) (string, string) {
	const unknown, version = unknownCommit, "module version"
	usable := func(v string) bool { return v != "" && v != "(devel)" }
	switch {
	case info == nil:
		return unknown, ""
	case info.Main.Path != modulePath:
		for _, d := range info.Deps {
			if d.Path != modulePath {
				continue
			}
			if d.Replace != nil {
				d = d.Replace
			}
			if usable(d.Version) {
				return d.Version, version
			}
		}
		return unknown, ""
	}
	var revision string
	var modified bool
	for _, kv := range info.Settings {
		switch kv.Key {
		case "vcs.revision":
			revision = kv.Value
		case "vcs.modified":
			modified = kv.Value == "true"
		}
	}
	switch {
	case revision != "" && modified:
		return revision + "-dirty", "vcs.revision"
	case revision != "":
		return revision, "vcs.revision"
	case usable(info.Main.Version):
		return info.Main.Version, version
	}
	return unknown, ""
}
