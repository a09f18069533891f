package provenance

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
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
		if got, _ := buildCommit(tc.info); got != tc.want {
			t.Errorf("%s: buildCommit = %q; want %q", tc.name, got, tc.want)
		}
	}
	if h := Harness(); h.Commit == "" {
		t.Errorf("Harness() = %+v; want a commit", h)
	}
}

// TestGitCommit: without a stamp in the build, the commit is asked of git
// in the module's checkout, with -dirty when its tree has changes.
func TestGitCommit(t *testing.T) {
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+modulePath+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "go.mod")
	git("commit", "-q", "-m", "one")
	head := git("rev-parse", "HEAD")
	if got, err := gitCommit(dir); err != nil || got != head {
		t.Errorf("clean: gitCommit = %q, %v; want %q", got, err, head)
	}
	if err := os.WriteFile(filepath.Join(dir, "new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := gitCommit(dir); err != nil || got != head+"-dirty" {
		t.Errorf("with a new file: gitCommit = %q, %v; want %q", got, err, head+"-dirty")
	}
	if _, err := gitCommit(t.TempDir()); err == nil {
		t.Error("gitCommit outside a checkout did not fail")
	}
}
