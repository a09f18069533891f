// Package docker starts the PostgreSQL servers harmless runs against in
// throwaway Docker containers, through testcontainers-go (any engine it
// finds: Docker, or Podman behind DOCKER_HOST). It is a package of its
// own so that only a program that asks for containers links that machinery
// (testcontainers-go, the moby client, gopsutil, OpenTelemetry): the suite
// and the adapters do not. The harmless command links it. A Go test that
// certifies with suite.Run and wants the suite to start PostgreSQL in a
// container when no DSN is set (in CI with a container engine, say) passes
// Start:
//
//	suite.RunWith(t, []suite.Option{suite.WithContainers(docker.Start)}, adapter)
//
// Without it, the suite uses a DSN or a throwaway cluster from local
// server binaries, and forcing the container way is an error that says to
// pass Start.
//
// # The container
//
// Start finds a container engine the way testcontainers-go finds one
// (DOCKER_HOST, the docker context, the default socket), pulls the image
// once if it is missing, and starts a server whose superuser, postgres, has
// a password generated for it, asked by SCRAM-SHA-256 of every connection,
// on a port published on the engine's 127.0.0.1 only, labelled with the
// owner process so that a later run removes it if this one is killed.
// Without a registry, build an image with ci/build-postgres-image.sh and
// name it in HARMLESS_IMAGE.
//
// # Environment for testcontainers-go
//
// testcontainers-go starts a reaper container (Ryuk) unless
// TESTCONTAINERS_RYUK_DISABLED=true; its image comes from Docker Hub. This
// package removes its own containers (above), so where the reaper image is
// not available the variable must be set; Start reports that when it is
// missing. The library reads the variable itself, from the process
// environment or ~/.testcontainers.properties (ryuk.disabled=true): it
// cannot be set per call. TESTCONTAINERS_HOST_OVERRIDE is honoured when set
// (the engine's 127.0.0.1 must then be forwarded there); otherwise the
// engine must be local, and the container is reached on 127.0.0.1. An engine
// elsewhere (DOCKER_HOST=tcp://another-host, or the host's engine seen from
// inside a container) is refused before anything starts: the port it would
// publish is on its own loopback, out of reach.
package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	mobycontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/harmless-dev/harmless/internal/provision"
)

const (
	// engineProbeTimeout bounds finding and asking the engine: no engine
	// must mean a quick fallback, not a hang.
	engineProbeTimeout = 15 * time.Second
	// pullTimeout bounds the one attempt to pull a missing image.
	// (testcontainers-go would retry a failing pull for 15 minutes.)
	pullTimeout = 5 * time.Minute
	// containerReadyTimeout bounds the wait for the server in a started
	// container, first start (initdb) included.
	containerReadyTimeout = 90 * time.Second
	// containerStopTimeout bounds waiting for a killed container to stop.
	containerStopTimeout = 30 * time.Second

	containerDB = "postgres"
	// containerPort is the server's port inside the container.
	containerPort = "5432/tcp"
	// containerAuth is how the server asks every connection for the
	// password. The image's entrypoint reads POSTGRES_HOST_AUTH_METHOD for
	// the line it adds to pg_hba.conf, and POSTGRES_INITDB_ARGS for the
	// lines initdb writes, which default to trust for the unix socket and
	// for loopback inside the container.
	containerAuth = "scram-sha-256"
)

// loopback is the only host address a container's port is published on.
var loopback = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// logAdapter sends testcontainers-go's log lines to Options.Logf.
type logAdapter func(format string, args ...any)

func (l logAdapter) Printf(format string, args ...any) {
	l("testcontainers: "+strings.TrimRight(format, "\n"), args...)
}

var _ tclog.Logger = logAdapter(nil)

// Server is a throwaway PostgreSQL server in a container, started by Start
// and owned by this process: its holder may crash it, start it again and
// must close it. It fits suite.WithContainers (suite.ContainerServer).
type Server struct {
	ctr      *tcpostgres.PostgresContainer
	provider *testcontainers.DockerProvider
	image    string
	host     string
	password string // generated for this container; see provision.NewPassword
	version  string
	logf     func(format string, args ...any)

	mu  sync.Mutex // guards dsn, which Restart changes
	dsn string
}

// String describes the container for logs, without credentials: its
// engine's short ID, which docker logs and docker inspect take, and its
// image.
func (c *Server) String() string {
	return fmt.Sprintf("container %.12s (%s)", c.ctr.GetContainerID(), c.image)
}

// DSN is a superuser connection string with the password; it changes on
// Restart (the engine maps a new host port), so read it again.
func (c *Server) DSN() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dsn
}

// Secrets are the passwords DSN carries (the one generated for this
// server), so that whoever writes logs can hide them. They do not change on
// Restart.
func (c *Server) Secrets() []string { return []string{c.password} }

// Version is the server's server_version.
func (c *Server) Version() string { return c.version }

// Start starts a throwaway PostgreSQL server in a container from image and
// returns it once it accepts connections; logf receives progress lines and
// may be nil. Before it starts anything, it removes the containers left by
// harmless processes that are gone. The caller must Close the server.
func Start(ctx context.Context, image string, logf func(format string, args ...any)) (srv *Server, err error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	logger := logAdapter(logf)
	provider, err := detectEngine(ctx, logger)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			provider.Close()
		}
	}()
	cli := provider.Client()
	cleanLeftoverContainers(ctx, cli, logf)

	if !testcontainers.ReadConfig().RyukDisabled {
		//lint:ignore SA1019 the library starts this image and offers no other way to name it, so that we can say it is missing
		if err := ensureImage(ctx, cli, testcontainers.ReaperDefaultImage, logf); err != nil {
			return nil, fmt.Errorf("%w; set TESTCONTAINERS_RYUK_DISABLED=true (harmless removes its own containers)", err)
		}
	}
	if err := ensureImage(ctx, cli, image, logf); err != nil {
		return nil, fmt.Errorf("%w; without a registry, build one with ci/build-postgres-image.sh and name it in HARMLESS_IMAGE", err)
	}
	host, err := containerHost(ctx, cli, provider)
	if err != nil {
		return nil, err
	}
	password, err := provision.NewPassword()
	if err != nil {
		return nil, err
	}

	began := time.Now()
	logf("starting container from %s", image)
	ctr, err := tcpostgres.Run(ctx, image,
		testcontainers.WithLogger(logger),
		testcontainers.WithLabels(provision.OwnerLabels()),
		tcpostgres.WithUsername(provision.Superuser),
		tcpostgres.WithPassword(password),
		tcpostgres.WithDatabase(containerDB),
		testcontainers.WithEnv(map[string]string{
			"POSTGRES_HOST_AUTH_METHOD": containerAuth,
			"POSTGRES_INITDB_ARGS":      "--auth-host=" + containerAuth + " --auth-local=" + containerAuth,
		}),
		testcontainers.WithHostConfigModifier(publishOnLoopback),
	)
	if err != nil {
		if ctr != nil {
			_ = ctr.Terminate(context.WithoutCancel(ctx), testcontainers.StopTimeout(0))
		}
		return nil, fmt.Errorf("start container from %s: %w", image, err)
	}
	c := &Server{ctr: ctr, provider: provider, image: image, host: host, password: password, logf: logf}
	defer func() {
		if err != nil {
			_ = ctr.Terminate(context.WithoutCancel(ctx), testcontainers.StopTimeout(0))
		}
	}()
	if c.version, err = c.waitReady(ctx); err != nil {
		return nil, err
	}
	logf("container ready in %.1fs: %s on %s (PostgreSQL %s)",
		time.Since(began).Seconds(), c, c.hostPort(), c.version)
	return c, nil
}

// publishOnLoopback publishes the server's port on 127.0.0.1 only, on a
// port the engine picks (again at every start): an engine left to itself
// publishes on 0.0.0.0 and [::], to every network the machine is on.
func publishOnLoopback(hc *mobycontainer.HostConfig) {
	hc.PublishAllPorts = false
	hc.PortBindings = network.PortMap{
		network.MustParsePort(containerPort): {{HostIP: loopback, HostPort: "0"}},
	}
}

// detectEngine finds a container engine and checks that it answers. The
// probe is bounded: NewDockerProvider takes no context.
func detectEngine(ctx context.Context, logger tclog.Logger) (*testcontainers.DockerProvider, error) {
	ctx, cancel := context.WithTimeout(ctx, engineProbeTimeout)
	defer cancel()
	type result struct {
		p   *testcontainers.DockerProvider
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := testcontainers.NewDockerProvider(testcontainers.WithLogger(logger))
		if err == nil {
			if err = p.Health(ctx); err != nil {
				p.Close()
			}
		}
		done <- result{p, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, engineMissing(ctx, r.err)
		}
		return r.p, nil
	case <-ctx.Done():
		go func() { // close the provider if the probe ever returns
			if r := <-done; r.err == nil {
				r.p.Close()
			}
		}()
		return nil, fmt.Errorf("none answered within %s: %w", engineProbeTimeout, context.Cause(ctx))
	}
}

// engineMissing says why testcontainers-go found no engine. Its own error
// is its last try's, "rootless Docker not found", even where Docker is
// installed and only its daemon is down: provision.FindDocker tells the
// cases apart at the address a user would look at first. Only when a
// daemon answers there is testcontainers-go's error the reason.
func engineMissing(ctx context.Context, err error) error {
	host, perr := provision.FindDocker(ctx, nil)
	if perr != nil {
		return perr
	}
	return fmt.Errorf("the Docker daemon at %s answers, but testcontainers-go cannot use it: %w", host, err)
}

// ensureImage makes sure the engine has the image: it pulls it once if
// missing, with a bound.
func ensureImage(ctx context.Context, cli client.APIClient, image string, logf func(string, ...any)) error {
	if _, err := cli.ImageInspect(ctx, image); err == nil {
		return nil
	}
	logf("image %s is not present; pulling it", image)
	ctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	pull, err := cli.ImagePull(ctx, image, client.ImagePullOptions{})
	if err == nil {
		err = pull.Wait(ctx)
		pull.Close()
	}
	if err != nil {
		return fmt.Errorf("image %s is not present and could not be pulled: %w", image, err)
	}
	return nil
}

// containerHost returns the host on which the container's published port
// is reached, before the container starts. testcontainers-go answers the
// bridge gateway when this process runs in a container (/.dockerenv),
// which is right when the engine is the host's, but not when the engine
// runs beside us, in our own network namespace: then, as for any local
// engine, 127.0.0.1 is right. TESTCONTAINERS_HOST_OVERRIDE wins, as in
// testcontainers-go (its user says the engine's loopback is forwarded
// there).
//
// The port is published on the engine's 127.0.0.1 only (publishOnLoopback),
// so an engine on another machine, or a host engine seen from inside a
// container, cannot be used: publishing where this process could reach it
// would let that whole network in. That is said here, before anything
// starts, rather than as a connection timeout later.
func containerHost(ctx context.Context, cli client.APIClient, provider *testcontainers.DockerProvider) (string, error) {
	if h := os.Getenv("TESTCONTAINERS_HOST_OVERRIDE"); h != "" {
		return h, nil
	}
	if u, err := url.Parse(cli.DaemonHost()); err == nil && u.Scheme == "unix" {
		if _, err := os.Stat("/.dockerenv"); err != nil || engineIsLocal(ctx, cli) {
			return loopback.String(), nil
		}
	}
	h, err := provider.DaemonHost(ctx)
	if err != nil {
		return "", fmt.Errorf("container host: %w", err)
	}
	if h == "localhost" {
		return loopback.String(), nil
	}
	if ip, err := netip.ParseAddr(h); err == nil && ip.IsLoopback() {
		return h, nil
	}
	return "", fmt.Errorf("the engine at %s publishes ports on %s, not on this machine's loopback: "+
		"harmless publishes its server on the engine's 127.0.0.1 only, so that no one else can connect; "+
		"use a local engine, or name a server with --dsn / HARMLESS_DSN", cli.DaemonHost(), h)
}

// engineIsLocal reports whether the engine's default bridge is attached to
// this network namespace (its gateway, or an address in its subnet, is one
// of ours), that is, whether the engine publishes ports where this process
// runs. Some engines report the bridge's subnet without its gateway.
func engineIsLocal(ctx context.Context, cli client.APIClient) bool {
	nw, err := cli.NetworkInspect(ctx, "bridge", client.NetworkInspectOptions{})
	if err != nil {
		return false
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, cfg := range nw.Network.IPAM.Config {
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			if (cfg.Gateway.IsValid() && ip == cfg.Gateway.Unmap()) || (cfg.Subnet.IsValid() && cfg.Subnet.Contains(ip)) {
				return true
			}
		}
	}
	return false
}

func (c *Server) hostPort() string {
	u, err := url.Parse(c.DSN())
	if err != nil {
		return ""
	}
	return u.Host
}

// waitReady reads the published port (it changes on every start), sets
// c.dsn and waits until the server accepts connections.
func (c *Server) waitReady(ctx context.Context) (string, error) {
	port, err := c.ctr.MappedPort(ctx, containerPort)
	if err != nil {
		return "", fmt.Errorf("published port: %w", err)
	}
	dsn := (&url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(provision.Superuser, c.password),
		Host:     net.JoinHostPort(c.host, port.Port()),
		Path:     "/" + containerDB,
		RawQuery: "sslmode=disable",
	}).String()
	c.mu.Lock()
	c.dsn = dsn
	c.mu.Unlock()
	return provision.WaitReady(ctx, dsn, containerReadyTimeout, c.logTail)
}

// logTail returns the last lines of the container's log, for errors.
func (c *Server) logTail() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := c.ctr.Logs(ctx)
	if err != nil {
		return ""
	}
	defer r.Close()
	b, _ := io.ReadAll(io.LimitReader(r, 1<<20))
	return "container log: " + provision.LastLines(string(b), 10)
}

// Crash sends the container SIGKILL (a real crash: no clean shutdown) and
// returns once the engine says it stopped.
func (c *Server) Crash(ctx context.Context) error {
	cli := c.provider.Client()
	id := c.ctr.GetContainerID()
	if _, err := cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "SIGKILL"}); err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	// The kill is asynchronous: wait until the engine says it stopped.
	ctx, cancel := context.WithTimeout(ctx, containerStopTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err == nil && st.Container.State != nil && !st.Container.State.Running {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still running after SIGKILL: %w", context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// Restart starts the crashed container again (PostgreSQL runs crash
// recovery) and returns once it accepts connections, on a new host port.
func (c *Server) Restart(ctx context.Context) error {
	st, err := c.ctr.State(ctx)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	if st.Running {
		return errors.New("the server is running: Crash it first")
	}
	if err := c.ctr.Start(ctx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	_, err = c.waitReady(ctx)
	return err
}

// Close removes the container and lets go of the engine.
func (c *Server) Close(ctx context.Context) error {
	defer c.provider.Close()
	if err := c.ctr.Terminate(ctx, testcontainers.StopTimeout(0)); err != nil {
		return fmt.Errorf("remove container: %w", err)
	}
	return nil
}

// cleanLeftoverContainers removes the containers labelled by this package
// whose owner is dead. Failures are logged: they must not keep this run
// from starting.
func cleanLeftoverContainers(ctx context.Context, cli client.APIClient, logf func(string, ...any)) {
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", provision.LabelOwnerPID),
	})
	if err != nil {
		logf("listing leftover containers: %v", err)
		return
	}
	for _, s := range list.Items {
		pid, dead := provision.DeadOwner(s.Labels)
		if !dead {
			continue
		}
		_, err := cli.ContainerRemove(ctx, s.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !errors.Is(err, context.Canceled) {
			logf("removing leftover container %.12s of dead process %d: %v", s.ID, pid, err)
			continue
		}
		logf("removed leftover container %.12s of dead process %d", s.ID, pid)
	}
}
