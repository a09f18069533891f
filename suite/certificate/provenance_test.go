package certificate

import (
	"runtime/debug"
	"testing"
)

func TestBuildCommit(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		s := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}}
		if modified != "" {
			s = append(s, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return s
	}
	harness := func(version string, settings ...debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: version}, Settings: settings}
	}
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "unknown"},
		{"clean checkout", harness("(devel)", vcs("0123abcd", "false")...), "0123abcd"},
		{"modified checkout", harness("(devel)", vcs("0123abcd", "true")...), "0123abcd-dirty"},
		{"revision without modified flag", harness("(devel)", vcs("0123abcd", "")...), "0123abcd"},
		{"go install of a release", harness("v0.1.0"), "v0.1.0"},
		{"go install of a pseudo-version", harness("v0.0.0-20261129234000-0123abcd4567"), "v0.0.0-20261129234000-0123abcd4567"},
		{"-buildvcs=false", harness("(devel)"), "unknown"},
		{"empty version", harness(""), "unknown"},
		{"a dependency of another module", &debug.BuildInfo{
			Main:     debug.Module{Path: "example.com/consumer", Version: "(devel)"},
			Settings: vcs("ffffffff", "true"),
			Deps:     []*debug.Module{{Path: "example.com/other", Version: "v9.9.9"}, {Path: modulePath, Version: "v0.1.0"}},
		}, "v0.1.0"},
		{"a dependency replaced by a local directory", &debug.BuildInfo{
			Main: debug.Module{Path: "example.com/consumer"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v0.1.0", Replace: &debug.Module{Path: "../harmless"}}},
		}, "unknown"},
		{"not in the build at all", &debug.BuildInfo{Main: debug.Module{Path: "example.com/consumer"}, Settings: vcs("ffffffff", "")}, "unknown"},
	} {
		if got := buildCommit(tc.info); got != tc.want {
			t.Errorf("%s: buildCommit = %q; want %q", tc.name, got, tc.want)
		}
	}
	if h := Harness(); h.Commit == "" {
		t.Errorf("Harness() = %+v; want a commit", h)
	}
}
