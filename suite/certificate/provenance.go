package certificate

import (
	"reflect"
	"runtime/debug"
	"strings"
)

// HarnessInfo identifies the build of the harness. The suite's version is
// the certificate's SuiteVersion.
type HarnessInfo struct {
	// Commit is the harness's source revision (see [Harness]).
	Commit string `json:"commit"`
}

// Harness returns the build of the running harness. Its commit is the VCS
// revision Go stamped into the binary, with "-dirty" appended when the
// working tree had changes; without a revision (go install of a released
// version, or a build with -buildvcs=false) it is the module's version,
// unless that is "(devel)"; else "unknown". When the harness is a
// dependency of the module under test (suite.Run in another module's
// tests), the main module's revision is not the harness's: the commit is
// then the version of the harness's module in the build, or "unknown".
func Harness() HarnessInfo {
	info, _ := debug.ReadBuildInfo() // nil when it cannot be read
	return HarnessInfo{Commit: buildCommit(info)}
}

// modulePath is the harness's module path.
var modulePath = strings.TrimSuffix(reflect.TypeFor[Certificate]().PkgPath(), "/suite/certificate")

// buildCommit finds the harness's commit in info (see [Harness]); nil info
// means none could be read.
func buildCommit(info *debug.BuildInfo) string {
	const unknown = "unknown"
	usable := func(v string) bool { return v != "" && v != "(devel)" }
	switch {
	case info == nil:
		return unknown
	case info.Main.Path != modulePath:
		for _, d := range info.Deps {
			if d.Path != modulePath {
				continue
			}
			if d.Replace != nil {
				d = d.Replace
			}
			if usable(d.Version) {
				return d.Version
			}
		}
		return unknown
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
		return revision + "-dirty"
	case revision != "":
		return revision
	case usable(info.Main.Version):
		return info.Main.Version
	}
	return unknown
}
