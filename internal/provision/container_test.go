package provision_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"

	"github.com/harmless-dev/harmless/suite/docker"
	// Dot-imported: the tests read as the package's own, as they did there.
	. "github.com/harmless-dev/harmless/internal/provision"
)

// The tests of the container way live in the external test package: the
// container engine is package container, which imports provision, so
// provision's own tests cannot import it. TestMain is here so that a child
// process can open a container too.

// containerPort is the server's port inside the container.
const containerPort = "5432/tcp"

func TestMain(m *testing.M) {
	if mode := os.Getenv(ChildEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	os.Exit(m.Run())
}

func runChild(mode string) int {
	ctx := context.Background()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "child: "+format+"\n", args...) }
	switch mode {
	case "no-database":
		if err := HideEngineSockets(); err != nil {
			fmt.Println("hiding the engine:", err)
			return 1
		}
		// Open with the real process environment, as the CLI would.
		_, err := Open(ctx, Options{Logf: logf, Container: Engine(docker.Start)})
		fmt.Println(err)
		if !errors.Is(err, ErrNoDatabase) {
			return 1
		}
		return 0
	case "hold-container":
		srv, err := Open(ctx, Options{Only: KindContainer, Logf: logf, Container: Engine(docker.Start)})
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("container:", containerID(srv))
		// Hold it until killed (or stdin closes).
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		_ = srv.Close(ctx)
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown child mode", mode)
	return 2
}

// containerID is the engine's ID of the container behind srv, in the
// short form the container's String names it by ("container <id>
// (<image>)"), which the engine takes wherever it takes an ID.
func containerID(srv *Server) string {
	c := srv.Container()
	if c == nil {
		return ""
	}
	var id string
	if _, err := fmt.Sscanf(c.String(), "container %s", &id); err != nil {
		return ""
	}
	return id
}

// engine is a client of the container engine, found the way
// testcontainers-go finds it, for looking at containers from outside.
func engine(t *testing.T) client.APIClient {
	t.Helper()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		t.Fatalf("container engine: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p.Client()
}

// needEngine skips the test when the container way cannot work here: no
// engine answers, testcontainers-go would start its reaper (whose image
// needs a registry), or the image is not present. With
// HARMLESS_REQUIRE_CONTAINER=1, as in CI, each of these fails the test
// instead, so the container way can never be skipped there by accident.
func needEngine(t *testing.T) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("HARMLESS_REQUIRE_CONTAINER") == "1" {
		skip = t.Fatalf
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	p, err := testcontainers.NewDockerProvider()
	if err == nil {
		err = p.Health(ctx)
		defer p.Close()
	}
	if err != nil {
		skip("no container engine (%v): start one with ci/start-docker.sh", err)
		return
	}
	if !testcontainers.ReadConfig().RyukDisabled {
		skip("TESTCONTAINERS_RYUK_DISABLED is not true: source ci/env.sh")
		return
	}
	image := os.Getenv("HARMLESS_IMAGE")
	if image == "" {
		image = DefaultImage
	}
	if _, err := p.Client().ImageInspect(t.Context(), image); err != nil {
		skip("image %s is not present (%v): build it with ci/build-postgres-image.sh and source ci/env.sh", image, err)
	}
}

// openContainer opens a server the container way, with package
// container's engine, as the CLI does.
func openContainer(ctx context.Context, logf func(string, ...any)) (*Server, error) {
	return Open(ctx, Options{Only: KindContainer, LookupEnv: Env("HARMLESS_IMAGE", os.Getenv("HARMLESS_IMAGE")), Logf: logf, Container: Engine(docker.Start)})
}

// TestContainerWayNeedsAnEngine checks that a program that links no
// container engine is told how to get one, when it forces the container
// way, and that the automatic order then goes on to a cluster.
func TestContainerWayNeedsAnEngine(t *testing.T) {
	ctx := Deadline(t, time.Minute)
	empty := t.TempDir()
	_, err := Open(ctx, Options{Only: KindContainer, LookupEnv: Env()})
	if !errors.Is(err, ErrNoDatabase) {
		t.Fatalf("Open forced to a container without an engine = %v, want ErrNoDatabase", err)
	}
	for _, w := range []string{"2) container engine: not linked into this program", "docker.Start", "suite.WithContainers"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q\n lacks %q", err, w)
		}
	}
	_, err = Open(ctx, Options{BinDir: empty, LookupEnv: Env()})
	if !errors.Is(err, ErrNoDatabase) || !strings.Contains(err.Error(), "2) container engine: not linked") ||
		!strings.Contains(err.Error(), "3) local server binaries (initdb, pg_ctl in Options.BinDir="+empty+"): not found") {
		t.Errorf("Open without an engine nor binaries = %v; want the container way not linked and the cluster way tried", err)
	}
}

func TestContainerIsPrivate(t *testing.T) {
	needEngine(t)
	ctx := Deadline(t, 5*time.Minute)
	logf, checkHides := RecordLog(t)
	srv, err := openContainer(ctx, logf)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	CloseServer(t, srv)
	cli, id := engine(t), containerID(srv)
	password := CheckSecrets(t, srv)
	if host := HostPort(srv.DSN()); !strings.HasPrefix(host, "127.0.0.1:") {
		t.Errorf("the DSN names %s, want 127.0.0.1", host)
	}

	checkLoopbackOnly(t, ctx, cli, id)
	CheckAuthConfig(t, ctx, srv.DSN())
	if err := Login(ctx, srv.DSN(), password); err != nil {
		t.Fatalf("with the DSN's password: %v", err)
	}
	CheckRefused(t, ctx, "the old fixed password", srv.DSN(), OldPassword)
	CheckRefused(t, ctx, "no password", srv.DSN(), "")

	// A crash and a restart: a new port, the same password, the same rules.
	before := srv.DSN()
	if err := srv.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted: %s -> %s", HostPort(before), HostPort(srv.DSN()))
	if got := CheckSecrets(t, srv); got != password {
		t.Error("the password changed on Restart")
	}
	checkLoopbackOnly(t, ctx, cli, id)
	if err := Login(ctx, srv.DSN(), password); err != nil {
		t.Errorf("the DSN after a restart: %v", err)
	}
	CheckRefused(t, ctx, "the old fixed password after a restart", srv.DSN(), OldPassword)
	CheckRefused(t, ctx, "no password after a restart", srv.DSN(), "")

	checkHides(password)
}

// checkLoopbackOnly checks, as the engine says it, that the container's
// only published port is the server's, on 127.0.0.1 only: both what was
// asked (HostConfig) and what the engine did (NetworkSettings).
func checkLoopbackOnly(t *testing.T, ctx context.Context, cli client.APIClient, id string) {
	t.Helper()
	insp, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	for what, ports := range map[string]map[string][]string{
		"asked":     bindingsOf(insp.Container.HostConfig.PortBindings),
		"published": bindingsOf(insp.Container.NetworkSettings.Ports),
	} {
		if len(ports) != 1 || len(ports[containerPort]) == 0 {
			t.Errorf("%s port bindings %v, want %s only", what, ports, containerPort)
		}
		for port, hosts := range ports {
			for _, h := range hosts {
				ip, _, _ := strings.Cut(h, " ")
				if a, err := netip.ParseAddr(ip); err != nil || a != want {
					t.Errorf("%s: %s is published on %s, want %s only", what, port, h, want)
				}
			}
		}
		t.Logf("%s port bindings: %v", what, ports)
	}
}

// bindingsOf lists a port map as port -> ["hostIP hostPort", ...]. An
// unset host IP (every address) shows as "invalid IP".
func bindingsOf(m network.PortMap) map[string][]string {
	out := map[string][]string{}
	for port, bs := range m {
		out[port.String()] = nil
		for _, b := range bs {
			out[port.String()] = append(out[port.String()], b.HostIP.String()+" "+b.HostPort)
		}
	}
	return out
}

func TestContainerCrashRestart(t *testing.T) {
	needEngine(t)
	ctx := Deadline(t, 5*time.Minute)
	began := time.Now()
	srv, err := openContainer(ctx, t.Logf)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	CloseServer(t, srv)
	t.Logf("container started in %s: %s", time.Since(began).Round(time.Millisecond), srv)
	if srv.Kind != KindContainer || !srv.Owned() || srv.Version == "" {
		t.Fatalf("got %s, owned %v", srv, srv.Owned())
	}
	cli, id := engine(t), containerID(srv)
	insp, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !IsOwnedBySelf(insp.Container.Config.Labels) {
		t.Errorf("owner labels say %v, want this process's %v", insp.Container.Config.Labels, OwnerLabels())
	}

	CrashAndRecover(t, ctx, srv, func() string { return fullLog(t, cli, id) }, func() {
		insp, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil || insp.Container.State.Running || insp.Container.State.ExitCode != 137 {
			t.Fatalf("after Crash: %+v, %v; want stopped by SIGKILL (exit 137)", insp.Container.State, err)
		}
	})

	if err := srv.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err == nil {
		t.Error("the container still exists after Close")
	}
}

// fullLog is the container's log, stdout and stderr.
func fullLog(t *testing.T, cli client.APIClient, id string) string {
	r, err := cli.ContainerLogs(t.Context(), id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, r); err != nil {
		t.Fatalf("read the container log: %v", err)
	}
	return out.String()
}

// TestLeftoverContainersOfKilledRunsAreRemoved starts a container from a
// child process, kills the child with SIGKILL (no cleanup runs), and
// checks that the next Open removes the container.
func TestLeftoverContainersOfKilledRunsAreRemoved(t *testing.T) {
	needEngine(t)
	ctx := Deadline(t, 5*time.Minute)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ChildEnv+"=hold-container")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe() // kept open: the child holds the container
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "container: ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child said %q, %v", line, err)
	}
	id := strings.TrimSpace(strings.TrimPrefix(line, "container: "))
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	cli := engine(t)
	if _, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err != nil {
		t.Fatalf("the killed child's container %.12s is not there to clean up: %v", id, err)
	}

	var lines []string
	srv, err := openContainer(ctx, func(f string, a ...any) {
		lines = append(lines, fmt.Sprintf(f, a...))
		t.Logf(f, a...)
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	CloseServer(t, srv)
	if _, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err == nil {
		t.Errorf("container %.12s of the killed child is still there", id)
	}
	if !strings.Contains(strings.Join(lines, "\n"), fmt.Sprintf("removed leftover container %.12s of dead process %d", id, cmd.Process.Pid)) {
		t.Errorf("no progress line about the removal in %q", lines)
	}
}

// TestNoDatabaseListsAllThreeWays runs Open in a child process that has no
// DSN, no container engine and an empty binaries directory: all three ways
// fail, and the error must say why for each, quickly.
//
// As root, the child runs in its own mount namespace with the engine's
// sockets covered, so that no engine is really there. Otherwise, where an
// engine is reachable, the child names a testcontainers provider that does
// not exist, which is the closest an unprivileged test can get.
func TestNoDatabaseListsAllThreeWays(t *testing.T) {
	ctx := Deadline(t, time.Minute)
	empty := t.TempDir()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	// The DSN variables are removed, not emptied: set but empty, a DSN is
	// refused (ErrEmptyDSN), not skipped.
	cmd.Env = append(environWithout("HARMLESS_DSN", "DATABASE_URL", "HARMLESS_PROVISION"),
		ChildEnv+"=no-database",
		"HARMLESS_PG_BINDIR="+empty,
		"DOCKER_HOST=", "DOCKER_CONTEXT=",
		"HOME="+empty, "XDG_RUNTIME_DIR="+empty, // no properties file, docker context or rootless socket
	)
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		cmd.Env = append(cmd.Env, HideEngineEnv+"=1")
	} else {
		cmd.Env = append(cmd.Env, "TESTCONTAINERS_PROVIDER=harmless-test-no-engine")
	}
	began := time.Now()
	out, err := cmd.Output()
	took := time.Since(began)
	if err != nil {
		t.Fatalf("child: %v\n%s%s", err, out, StderrOf(err))
	}
	msg := strings.TrimSpace(string(out))
	t.Logf("after %s: %s", took.Round(time.Millisecond), msg)
	for _, w := range []string{
		"no PostgreSQL server available: ",
		"1) --dsn / HARMLESS_DSN / DATABASE_URL: not set;",
		"2) container engine: ",
		"3) local server binaries (initdb, pg_ctl in HARMLESS_PG_BINDIR=" + empty + "): not found",
	} {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q", w)
		}
	}
	// The engine's reason says which of its states the machine is in
	// (see TestFindDockerTellsTheStatesApart), not testcontainers-go's
	// last try.
	if strings.Contains(msg, "rootless Docker not found") || !strings.Contains(msg, "Docker") {
		t.Errorf("the container engine's reason is not said in terms of Docker: %s", msg)
	}
	if took > 20*time.Second {
		t.Errorf("took %s to find nothing; no engine must fail fast", took)
	}
}

// environWithout is this process's environment without the variables
// named, for a child that must see them unset.
func environWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			env = append(env, kv)
		}
	}
	return env
}
