package depgraph

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/harmless-dev/harmless"

// heavy are the import path prefixes of the container machinery that a
// package for implementers must not link.
var heavy = []string{
	"github.com/testcontainers/",
	"github.com/moby/",
	"github.com/docker/",
	"github.com/shirou/gopsutil",
}

// light lists the packages an implementer imports and what each must not
// link beyond the container machinery.
var light = []struct {
	pkg    string
	forbid []string // further import path prefixes it must not link
}{
	// The implementer's API: pgx for Effect.Apply's pgx.Tx, no pool.
	{pkg: module + "/adapters", forbid: []string{"github.com/jackc/pgx/v5/pgxpool", "github.com/onsi/"}},
	// The fixture catalogue is data: nothing outside the standard library.
	{pkg: module + "/fixtures", forbid: []string{""}},
	// The certificate and its reports: no test framework, no pool.
	{pkg: module + "/suite/certificate", forbid: []string{"github.com/jackc/pgx/v5/pgxpool", "github.com/onsi/"}},
	// The suite a Go test certifies with: the container engine is package
	// container, linked by who passes suite.WithContainers(docker.Start).
	{pkg: module + "/suite"},
	// Provisioning takes the container engine as a hook.
	{pkg: module + "/internal/provision"},
}

// heavyUsers are the packages that do link the container machinery: the
// container engine itself and the command, which always offers it.
var heavyUsers = []string{module + "/suite/docker", module + "/cmd/harmless"}

// deps returns the packages that a program importing pkgs links and that
// are not in the standard library, the module's own included.
func deps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	return goList(t, append([]string{"-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, pkgs...)...)
}

// goList runs go list with args and returns the words it prints.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the import graph: %v", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), goCmd, append([]string{"list"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.Fields(stdout.String())
}

// matching returns the packages of list whose path starts with one of
// prefixes, leaving out the module's own packages when skipOwn is set.
func matching(list []string, prefixes []string, skipOwn bool) []string {
	var out []string
	for _, p := range list {
		if skipOwn && (p == module || strings.HasPrefix(p, module+"/")) {
			continue
		}
		for _, prefix := range prefixes {
			if strings.HasPrefix(p, prefix) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// TestDetectorSeesTheContainerMachinery is the control: the package that
// provisions by container, and the command that links it, do link
// testcontainers, so an empty answer below means a light package, not a
// listing that found nothing. It logs their counts, the other figure issue
// 12 measures.
func TestDetectorSeesTheContainerMachinery(t *testing.T) {
	for _, pkg := range heavyUsers {
		list := deps(t, pkg)
		t.Logf("%s links %d non-standard packages, %d of them container machinery", pkg, len(list), len(matching(list, heavy, true)))
		for _, prefix := range []string{"github.com/testcontainers/", "github.com/moby/", "github.com/shirou/gopsutil"} {
			if len(matching(list, []string{prefix}, true)) == 0 {
				t.Errorf("go list -deps %s shows nothing under %s; the import graph check cannot be trusted", pkg, prefix)
			}
		}
	}
}

// TestImplementerPackagesAreLight checks that the packages an implementer
// imports link none of the container machinery, and logs how many
// non-standard packages each links (the module's own included), the figure
// issue 12 measures.
func TestImplementerPackagesAreLight(t *testing.T) {
	for _, l := range light {
		t.Run(strings.TrimPrefix(l.pkg, module+"/"), func(t *testing.T) {
			list := deps(t, l.pkg)
			own := len(list) - len(matching(list, []string{""}, true))
			t.Logf("%s links %d non-standard packages (%d of them the module's own)", l.pkg, len(list), own)
			if bad := matching(list, heavy, true); len(bad) > 0 {
				t.Errorf("%s links the container machinery: %s", l.pkg, describe(bad))
			}
			if bad := matching(list, l.forbid, true); len(bad) > 0 {
				t.Errorf("%s links what it must not: %s", l.pkg, describe(bad))
			}
		})
	}
}

// TestCertificateReaderIsLight checks what a program that reads and
// writes certificates links: one importing adapters, fixtures and
// suite/certificate links no test framework (Ginkgo, Gomega), no pgx pool,
// none of the container machinery and none of the suite, and the
// certificate adds no package to what adapters and fixtures link (adapters
// links pgx's connection and types for Effect.Apply's pgx.Tx; that is all
// of pgx such a program gets), but internal/failuremsg, the shape of a
// failure message that its excerpts read, which links nothing outside the
// standard library. The certificate imports, of the module's packages,
// only adapters, fixtures and internal/failuremsg.
func TestCertificateReaderIsLight(t *testing.T) {
	cert, msg := module+"/suite/certificate", module+"/internal/failuremsg"
	if list := deps(t, msg); len(list) != 1 || list[0] != msg {
		t.Errorf("internal/failuremsg links non-standard packages: %s", describe(list))
	}
	program := deps(t, module+"/adapters", module+"/fixtures", cert)
	t.Logf("a program importing adapters, fixtures and suite/certificate links %d non-standard packages", len(program))
	forbid := append([]string{"github.com/onsi/", "github.com/jackc/pgx/v5/pgxpool", module + "/suite/", module + "/internal/harness"}, heavy...)
	for _, bad := range matching(program, forbid, false) {
		if bad != cert {
			t.Errorf("the program links %s", bad)
		}
	}
	base := map[string]bool{cert: true, msg: true}
	for _, p := range deps(t, module+"/adapters", module+"/fixtures") {
		base[p] = true
	}
	for _, p := range program {
		if !base[p] {
			t.Errorf("suite/certificate adds %s to what adapters and fixtures link", p)
		}
	}
	for _, imp := range goList(t, "-f", "{{join .Imports \"\\n\"}}", cert) {
		if strings.HasPrefix(imp, module+"/") && imp != module+"/adapters" && imp != module+"/fixtures" && imp != msg {
			t.Errorf("suite/certificate imports %s; of the module's packages it may import only adapters, fixtures and internal/failuremsg", imp)
		}
	}
}

// describe lists at most ten packages.
func describe(list []string) string {
	if len(list) > 10 {
		return fmt.Sprintf("%s and %d more", strings.Join(list[:10], ", "), len(list)-10)
	}
	return strings.Join(list, ", ")
}

// toolsOnly are the module's packages that no public package may link: the
// built-in adapters and their registry, the soak, the verdict matrix, the
// generated docs and the command. They sit above the public packages
// (docs/architecture.md, "Layers"), so a public package that linked one
// would drag the harness's own tools into every implementer's build.
var toolsOnly = []string{
	module + "/internal/adapters/broken",
	module + "/internal/adapters/alternatives",
	module + "/internal/adapters/builtin",
	module + "/internal/soak",
	module + "/internal/verdictmatrix",
	module + "/internal/docgen",
	module + "/cmd/",
}

// TestPublicPackagesStayBelowTheTools checks the dependency direction of
// docs/architecture.md: every package outside internal/, cmd/ and
// examples/ links none of toolsOnly. The control is the command, which
// must link them, so that an empty answer means a clean graph, not a
// listing that found nothing.
func TestPublicPackagesStayBelowTheTools(t *testing.T) {
	if bad := matching(deps(t, module+"/cmd/harmless"), toolsOnly[:3], false); len(bad) == 0 {
		t.Fatal("go list -deps ./cmd/harmless shows no built-in adapter; the check cannot be trusted")
	}
	var public []string
	for _, p := range goList(t, module+"/...") {
		rel := strings.TrimPrefix(p, module+"/")
		if p == module || strings.HasPrefix(rel, "internal/") || strings.Contains(rel, "/internal/") ||
			strings.HasPrefix(rel, "cmd/") || strings.HasPrefix(rel, "examples/") || strings.HasSuffix(rel, "test") {
			continue
		}
		public = append(public, p)
	}
	if len(public) < 8 {
		t.Fatalf("found only %d public packages (%v); the listing cannot be trusted", len(public), public)
	}
	for _, p := range public {
		if bad := matching(deps(t, p), toolsOnly, false); len(bad) > 0 {
			t.Errorf("public package %s links the harness's tools: %s", p, describe(bad))
		}
	}
	t.Logf("%d public packages checked: %s", len(public), strings.Join(public, " "))
}
