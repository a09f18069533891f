// Package provision finds or starts the PostgreSQL server that harmless runs
// against. It is one package, used by both the conformance suite and the CLI.
//
// # Order of choice
//
// Open takes the first of three ways that works:
//
//  1. An explicit DSN: Options.DSN (the CLI's --dsn), else $HARMLESS_DSN, else
//     $DATABASE_URL. A DSN that is set but does not parse or does not connect
//     is an error: Open never falls back from a server the user named. So
//     is a variable set but empty ($HARMLESS_DSN=, ErrEmptyDSN), which
//     names no server but was not left unset either: the first variable
//     set is the one read, and an empty one is not skipped for the next.
//  2. A throwaway container, when the program linked a container engine
//     (Options.Container: package container's Start, which the harmless
//     command and suite.WithContainers pass), from Options.Image, else
//     $HARMLESS_IMAGE, else postgres:17-alpine. Without one, this way is
//     reported as not linked and skipped. See package container for how
//     the engine is found and the container published.
//  3. A throwaway cluster from local server binaries (initdb and pg_ctl in
//     Options.BinDir, else $HARMLESS_PG_BINDIR, else on $PATH, else in the
//     newest /usr/lib/postgresql/*/bin), in a fresh directory harmless-pg-*
//     under /dev/shm when it is a tmpfs with room and TMPDIR is unset, else
//     under os.TempDir (see serverdir.go for why), listening on 127.0.0.1 on a free port and on a unix
//     socket in that directory, fsync off. When running as root, the
//     cluster runs as the postgres user, since initdb and pg_ctl refuse to
//     run as root.
//
// Options.Only, or $HARMLESS_PROVISION=dsn|container|cluster|ha, forces one
// way. When no way works, Open returns an error wrapping ErrNoDatabase that
// says why each of the three failed.
//
// # The fourth way: an HA formation
//
// KindHA, only when forced (Options.Only or $HARMLESS_PROVISION=ha, the
// CLI's --provision ha), never in the order above, starts a
// pg_auto_failover formation for the failover fixtures: a monitor and two
// data nodes, a primary and its synchronous secondary, from pg_autoctl
// (Debian's pg-auto-failover-cli) and the server binaries of a major
// version for which the pgautofailover extension is installed
// (postgresql-<major>-auto-failover), in a fresh directory harmless-ha-*
// where a cluster's would be. It is private as a cluster is (its unix sockets, in
// that directory, take only the server's user, by peer authentication).
// Server.DSN names both nodes, the current primary first, with
// target_session_attrs=read-write; Server.Formation makes the faults
// (Formation.Failover, Formation.StallReplication) and reads the
// monitor's view. Crash and Restart are errors there: a crash of the
// primary is a failover.
//
// # Private servers
//
// A server this package starts lets no one in but the holder of its DSN,
// since it runs on a shared machine next to other users and other
// networks:
//
//   - its superuser, postgres, has a password generated for it (24 bytes
//     from crypto/rand, in hex), never a fixed one; Server.DSN carries it
//     and Server.Secrets returns it, so that whoever writes logs or reports
//     can hide it;
//   - every connection is asked for that password by SCRAM-SHA-256: every
//     line of pg_hba.conf, TCP and unix socket alike, and none trusts (an
//     HA formation's sockets, in its private directory, take only the
//     server's user, by peer authentication, as pg_autoctl needs). The
//     cluster gets it from initdb (--auth-host, --auth-local, --pwfile with
//     a file removed as soon as initdb is done); the container from the
//     image's entrypoint, through POSTGRES_PASSWORD,
//     POSTGRES_HOST_AUTH_METHOD and POSTGRES_INITDB_ARGS, which the
//     official image and ci/build-postgres-image.sh's both honour;
//   - the container's port is published on 127.0.0.1 only, never on
//     0.0.0.0 or [::]; the cluster listens on 127.0.0.1 only;
//   - the cluster's directory, its data directory and its socket directory
//     are mode 0700, the server user's; so are an HA formation's.
//
// The password stays the same across Restart; the container's port does
// not, which is why DSN must be read again after a restart. Whoever may use
// the container engine can read the container's environment, password
// included; such a user is root on the machine anyway.
//
// # Owned servers
//
// A container or a cluster is owned by this process (Server.Owned): the
// harness may crash it (Server.Crash, a real crash: SIGKILL to the container,
// `pg_ctl stop -m immediate` for a cluster) and start it again
// (Server.Restart, which runs crash recovery). Server.Close removes it.
//
// # Leftovers
//
// Everything a run creates is labelled with its owner (pid, process start
// time, host): containers by the labels dev.harmless.owner-*, clusters by
// their directory name harmless-pg-<pid>-* and an owner file inside, HA
// formations by harmless-ha-<pid>-* and an owner file. A run that is killed
// cannot clean up, so Open removes the containers, clusters and formations
// whose owner is no longer alive before it starts anything, killing a
// formation's processes first. A
// directory named like a cluster's but without an owner file is removed only
// when it is empty (a run killed before it wrote the file leaves it so):
// otherwise it is not harmless's.
//
// # Linking
//
// This package links no container machinery: the container way is a hook,
// Options.Container, so that a program that imports the suite but never
// asks for containers does not link testcontainers-go, the moby client or
// gopsutil (internal/depgraph checks it).
package provision

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Kind says how a Server was provisioned.
type Kind string

const (
	// KindDSN is a server named by a DSN; harmless does not own it.
	KindDSN Kind = "dsn"
	// KindContainer is a throwaway container started through a container engine.
	KindContainer Kind = "container"
	// KindCluster is a throwaway cluster started from local server binaries.
	KindCluster Kind = "cluster"
	// KindHA is a pg_auto_failover formation (a monitor, a primary and a
	// secondary) started from local packages; only when forced, never in
	// the automatic order. See Server.Formation.
	KindHA Kind = "ha"
)

// DefaultImage is the container image used when neither Options.Image nor
// $HARMLESS_IMAGE names one.
const DefaultImage = "postgres:17-alpine"

// ErrNoDatabase is returned, wrapped, by Open when none of the three ways
// gives a server. The wrapping error says why each way failed.
var ErrNoDatabase = errors.New("no PostgreSQL server available")

// Options control Open. The zero value means: look at the environment and
// take the first way that works.
type Options struct {
	// DSN is an explicit connection string (the CLI's --dsn). If empty,
	// $HARMLESS_DSN, else $DATABASE_URL.
	DSN string
	// Image is the container image. If empty, $HARMLESS_IMAGE, else
	// DefaultImage.
	Image string
	// Only forces one way ("" = the automatic order). If empty,
	// $HARMLESS_PROVISION (dsn, container, cluster or ha). KindHA is
	// taken only when forced.
	Only Kind
	// BinDir is the directory holding initdb and pg_ctl for the cluster
	// and HA ways. If empty, $HARMLESS_PG_BINDIR, else $PATH, else the newest
	// /usr/lib/postgresql/*/bin. When set, only this directory is searched.
	BinDir string
	// Logf receives progress lines ("starting throwaway cluster in ...",
	// "container ready in 2.1s"). May be nil.
	Logf func(format string, args ...any)
	// Container starts a throwaway server in a container: package
	// container's Start. Nil means the container way is unavailable, and
	// the automatic order goes from a DSN straight to a cluster.
	Container StartContainer
	// LookupEnv reads harmless's environment variables (HARMLESS_*,
	// DATABASE_URL, PATH); nil means os.LookupEnv. It tells a variable set
	// but empty from one unset: an empty $HARMLESS_DSN or $DATABASE_URL is
	// refused (ErrEmptyDSN) rather than read as no DSN, since the user who
	// set it meant a server and would otherwise get a throwaway one. It
	// lets tests control the environment without mutating it. The
	// container engine reads its own variables (DOCKER_HOST,
	// TESTCONTAINERS_*) from the process.
	LookupEnv func(string) (string, bool)
}

// ErrEmptyDSN is returned, wrapped, when the DSN harmless would use is set
// but empty ($HARMLESS_DSN= or $DATABASE_URL=): an empty value names no
// server, and taking it for "unset" would silently start a throwaway one
// where the user meant theirs. The wrapping error names the variable.
var ErrEmptyDSN = errors.New("the DSN is empty")

// getenv is o.LookupEnv as a Getenv: unset and empty alike are "".
func (o Options) getenv() func(string) string {
	lookup := o.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	return func(k string) string {
		v, _ := lookup(k)
		return v
	}
}

// settings are Options with the environment and defaults applied.
type settings struct {
	dsn, dsnSource string
	image          string
	only           Kind
	binDir         string
	binDirSource   string
	path           string
	// serverDir is the directory in which a throwaway server's directory
	// is made (see serverParent).
	serverDir string
	logf      func(format string, args ...any)
	container StartContainer
}

func (o Options) resolve() (settings, error) {
	getenv := o.getenv()
	s := settings{logf: o.Logf, path: getenv("PATH"), container: o.Container, serverDir: serverParent(getenv)}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	// The first DSN set is the one: a variable set but empty is not
	// skipped for the next, but refused below where a DSN is wanted.
	s.dsn, s.dsnSource = o.DSN, "--dsn"
	emptyDSN := false
	if s.dsn == "" {
		lookup := o.LookupEnv
		if lookup == nil {
			lookup = os.LookupEnv
		}
		for _, k := range []string{"HARMLESS_DSN", "DATABASE_URL"} {
			if v, ok := lookup(k); ok {
				s.dsn, s.dsnSource, emptyDSN = v, k, v == ""
				break
			}
		}
	}
	s.image = firstNonEmpty(o.Image, getenv("HARMLESS_IMAGE"), DefaultImage)
	s.binDir, s.binDirSource = o.BinDir, "Options.BinDir"
	if s.binDir == "" {
		s.binDir, s.binDirSource = getenv("HARMLESS_PG_BINDIR"), "HARMLESS_PG_BINDIR"
	}
	s.only = o.Only
	if s.only == "" {
		s.only = Kind(strings.TrimSpace(getenv("HARMLESS_PROVISION")))
	}
	switch s.only {
	case "", KindDSN, KindContainer, KindCluster, KindHA:
	default:
		return s, fmt.Errorf("provision: unknown way %q (HARMLESS_PROVISION / Options.Only): want %s, %s, %s or %s",
			s.only, KindDSN, KindContainer, KindCluster, KindHA)
	}
	// An empty DSN matters only where a DSN would be taken: a way forced
	// past it (a cluster, a container, a formation) does not read it.
	if emptyDSN && (s.only == "" || s.only == KindDSN) {
		return s, fmt.Errorf("provision: %w (%s is set but empty): unset it to let harmless start a throwaway server, or give a DSN", ErrEmptyDSN, s.dsnSource)
	}
	return s, nil
}

// Planned returns the way Open would take with these options, without
// starting or connecting to anything: KindDSN when a DSN is given or
// forced, KindContainer, KindCluster or KindHA when that way is forced,
// KindCluster when it is the only one left, and "" when Open would try a container, then a cluster.
// Only a server named by a DSN is not owned, so whether a run may crash
// its server is known before the run: `harmless list --adapter` says
// which rules will run from it. Whether the way then works is not known
// until Open tries it.
func (o Options) Planned() (Kind, error) {
	s, err := o.resolve()
	switch {
	case err != nil:
		return "", err
	case s.only != "":
		return s.only, nil
	case s.dsn != "":
		return KindDSN, nil
	case s.container == nil:
		return KindCluster, nil
	}
	return "", nil
}

// NamedDSN returns the DSN Open would connect to with these options, and
// where it comes from (--dsn, HARMLESS_DSN or DATABASE_URL); "" when Open
// would take another way. Nothing is connected to: a caller that must
// check the server before a run (its free connections, say) connects
// with it itself.
func (o Options) NamedDSN() (dsn, source string, err error) {
	s, err := o.resolve()
	if err != nil || (s.only != "" && s.only != KindDSN) {
		return "", "", err
	}
	return s.dsn, s.dsnSource, nil
}

// CheckDSN connects to the server Open would use when that is one named
// by a DSN, as Open would, and returns its server_version; "" and no
// error when Open would take another way. It starts nothing and cleans
// up no leftovers, so that `harmless list --adapter` can say the DSN
// works, or that it does not, before any run. It is bounded as Open's
// check is, and by ctx.
func (o Options) CheckDSN(ctx context.Context) (string, error) {
	s, err := o.resolve()
	switch {
	case err != nil:
		return "", err
	case s.only != "" && s.only != KindDSN:
		return "", nil
	case s.dsn == "":
		return "", fmt.Errorf("provision: %w: no DSN is set (--dsn, HARMLESS_DSN or DATABASE_URL)", ErrNoDatabase)
	}
	srv, err := openDSN(ctx, s)
	if err != nil {
		return "", err
	}
	return srv.Version, nil
}

// oneLine joins the lines of a multi-line error message (errors.Join,
// server output), so that each way's reason stays on its line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// backend is what a Server delegates to for an owned server.
type backend interface {
	crash(ctx context.Context) error
	// restart starts the server again and returns its (possibly new) DSN.
	restart(ctx context.Context) (string, error)
	close(ctx context.Context) error
	describe() string
}

// Server is a PostgreSQL server that Open found or started. Its methods are
// safe for concurrent use; Crash, Restart, Close and the methods of its
// Formation run one at a time.
type Server struct {
	// Kind says which way provided the server.
	Kind Kind
	// Version is the server's server_version, e.g. "15.13 (Debian 15.13-0+deb12u1)".
	Version string

	ops  sync.Mutex // serialises Crash, Restart, Close and the Formation's methods
	mu   sync.Mutex // guards dsn and closed
	dsn  string
	b    backend // nil for KindDSN
	logf func(format string, args ...any)
	// secrets are the passwords in dsn: the one generated for an owned
	// server, the one in the DSN of a named server. They do not change
	// on Restart.
	secrets []string

	closed bool
}

// DSN returns a superuser connection string for the server, with its
// password (see Secrets). It changes after Restart for a container (the
// engine maps a new host port), and after a failover of an HA formation
// (the new primary comes first), so read it again rather than keeping it;
// the password stays the same.
func (s *Server) DSN() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dsn
}

// Secrets returns the passwords that DSN carries, so that a caller can
// hide them in what it writes (logs, reports, certificates): for a
// container or a cluster, the password generated for it; for a server
// named by a DSN, that DSN's password, if it has one. The passwords stay
// the same across Restart. The slice is a copy.
func (s *Server) Secrets() []string {
	return slices.Clone(s.secrets)
}

// Owned reports whether this process started the server (a container, a
// cluster or an HA formation), so that the harness may crash it (a
// formation: fail it over, see Formation).
func (s *Server) Owned() bool { return s.b != nil }

// String describes the server for logs, without credentials.
func (s *Server) String() string {
	if s.b == nil {
		where := "a server named by a DSN"
		if cfg, err := pgconn.ParseConfig(s.DSN()); err == nil {
			where = fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
		}
		return fmt.Sprintf("PostgreSQL %s (%s)", s.Version, where)
	}
	return fmt.Sprintf("PostgreSQL %s (%s)", s.Version, s.b.describe())
}

// Crash kills an owned server without a clean shutdown: the container is
// sent SIGKILL, the cluster is stopped with `pg_ctl stop -m immediate`.
// It is an error for a server named by a DSN, and for an HA formation,
// whose primary fails over instead (Formation.Failover).
func (s *Server) Crash(ctx context.Context) error {
	if err := s.ownedOp("crash"); err != nil {
		return err
	}
	s.ops.Lock()
	defer s.ops.Unlock()
	if err := s.b.crash(ctx); err != nil {
		return fmt.Errorf("provision: crash %s: %w", s.b.describe(), err)
	}
	s.logf("crashed %s", s.b.describe())
	return nil
}

// Restart starts an owned server again after Crash (PostgreSQL runs crash
// recovery) and returns once it accepts connections. DSN reflects the new
// address afterwards. For an HA formation it is an error, as Crash is: a
// killed node comes back with Formation.WaitHealthy.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.ownedOp("restart"); err != nil {
		return err
	}
	s.ops.Lock()
	defer s.ops.Unlock()
	start := time.Now()
	dsn, err := s.b.restart(ctx)
	if err != nil {
		return fmt.Errorf("provision: restart %s: %w", s.b.describe(), err)
	}
	s.mu.Lock()
	s.dsn = dsn
	s.mu.Unlock()
	s.logf("restarted %s in %.1fs", s.b.describe(), time.Since(start).Seconds())
	return nil
}

// Close stops and removes an owned server: the container is removed, the
// cluster or the HA formation is stopped and its directory deleted. For a server named by a DSN
// it does nothing. Calling Close again does nothing.
func (s *Server) Close(ctx context.Context) error {
	if s.b == nil {
		return nil
	}
	s.ops.Lock()
	defer s.ops.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.closed = true
	s.mu.Unlock()
	if closed {
		return nil
	}
	if err := s.b.close(ctx); err != nil {
		return fmt.Errorf("provision: close %s: %w", s.b.describe(), err)
	}
	s.logf("removed %s", s.b.describe())
	return nil
}

func (s *Server) ownedOp(op string) error {
	if s.b == nil {
		return fmt.Errorf("provision: cannot %s a server named by a DSN: harmless does not own it", op)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("provision: cannot %s %s: closed", op, s.b.describe())
	}
	return nil
}

// Open returns a PostgreSQL server, found or started in the order described
// in the package documentation. The caller must Close it.
func Open(ctx context.Context, opts Options) (*Server, error) {
	st, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	cleanLeftoverClusters(ctx, st)
	cleanLeftoverFormations(ctx, st)
	bin, _ := findBinaries(st)
	cleanLeftoverTemplates(bin)

	why := [3]string{"not tried", "not tried", "not tried"}
	if st.only != "" {
		for i, k := range []Kind{KindDSN, KindContainer, KindCluster} {
			if k != st.only {
				why[i] = fmt.Sprintf("not tried (forced way: %s)", st.only)
			}
		}
	}

	// 4. An HA formation, only when forced.
	if st.only == KindHA {
		srv, err := openHA(ctx, st)
		if err == nil {
			return srv, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("provision: %w", err)
		}
		return nil, fmt.Errorf("%w: 1) --dsn / HARMLESS_DSN / DATABASE_URL: %s; 2) container engine: %s; 3) %s: %s; 4) %s: %s",
			ErrNoDatabase, why[0], why[1], st.binariesWhere(), why[2], haWhere, oneLine(err.Error()))
	}

	// 1. An explicit DSN. Set but broken is an error, never a fallback.
	if st.only == "" || st.only == KindDSN {
		if st.dsn != "" {
			return openDSN(ctx, st)
		}
		why[0] = "not set"
	}

	// 2. A container engine, 3. local server binaries.
	ways := []struct {
		kind Kind
		open func(context.Context, settings) (*Server, error)
	}{{KindContainer, openContainer}, {KindCluster, openCluster}}
	for i, w := range ways {
		if st.only != "" && st.only != w.kind {
			continue
		}
		srv, err := w.open(ctx, st)
		if err == nil {
			return srv, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("provision: %w", err)
		}
		why[i+1] = oneLine(err.Error())
		next := ""
		if w.kind == KindContainer && st.only == "" {
			// Said here, once, so that the reason does not read as the
			// end of the run.
			next = "; starting a throwaway cluster instead"
		}
		st.logf("no %s: %s%s", w.kind, why[i+1], next)
	}

	return nil, fmt.Errorf("%w: 1) --dsn / HARMLESS_DSN / DATABASE_URL: %s; 2) container engine: %s; 3) %s: %s",
		ErrNoDatabase, why[0], why[1], st.binariesWhere(), why[2])
}

// Choice is the server Open would use with some Options, as far as that
// can be told without starting one: see Options.Choose.
type Choice struct {
	// Kind is the way: KindDSN, KindContainer, KindCluster or KindHA; ""
	// when no way would work (Open would fail with ErrNoDatabase).
	Kind Kind
	// Where says, for people, which server that is: "a throwaway cluster
	// (binaries: /usr/lib/postgresql/15/bin)", "a container (Docker at
	// unix:///var/run/docker.sock, image postgres:17-alpine)", "the server
	// at 127.0.0.1:5432/postgres named by --dsn", "an HA formation
	// (pg_auto_failover: /usr/bin/pg_autoctl, binaries:
	// /usr/lib/postgresql/15/bin)", or "none".
	Where string
	// Note says why a way before it was passed over ("no container: ..."),
	// or why the way forced, or every way, would fail; "" when there is
	// nothing to say.
	Note string
}

// Choose resolves the way Open would take with these options without
// starting anything: a DSN is parsed but not connected to (CheckDSN
// connects to it); the container way is taken when it is linked and a
// Docker daemon answers its ping at DOCKER_HOST or /var/run/docker.sock
// (FindDocker); the cluster way when
// initdb and pg_ctl are found; the HA way, only when forced, when
// pg_autoctl and server binaries with the extension are. Planned stops at
// "a container, else a cluster"; `harmless list --adapter` says which, and
// where. Whether the way then works (the image pulls, the cluster starts)
// is only known when Open tries it.
func (o Options) Choose(ctx context.Context) (Choice, error) {
	st, err := o.resolve()
	if err != nil {
		return Choice{}, err
	}
	getenv := o.getenv()
	if st.only == KindHA {
		tools, err := findHATools(ctx, st)
		if err != nil {
			return Choice{KindHA, "an HA formation", oneLine(err.Error())}, nil
		}
		return Choice{KindHA, fmt.Sprintf("an HA formation (pg_auto_failover: %s, binaries: %s)", tools.autoctl, tools.bin), ""}, nil
	}
	if st.only == KindDSN || (st.only == "" && st.dsn != "") {
		if st.dsn == "" {
			return Choice{KindDSN, "none", "no DSN is set (--dsn, HARMLESS_DSN or DATABASE_URL)"}, nil
		}
		cfg, err := pgconn.ParseConfig(st.dsn)
		if err != nil {
			return Choice{KindDSN, "a DSN from " + st.dsnSource, "it does not parse"}, nil
		}
		return Choice{KindDSN, fmt.Sprintf("the server at %s:%d/%s named by %s", cfg.Host, cfg.Port, cfg.Database, st.dsnSource), ""}, nil
	}
	var noContainer string
	if st.only == "" || st.only == KindContainer {
		if st.container == nil {
			noContainer = "not linked into this program"
		} else {
			host, err := FindDocker(ctx, getenv)
			if err == nil {
				return Choice{KindContainer, fmt.Sprintf("a container (Docker at %s, image %s)", host, st.image), ""}, nil
			}
			noContainer = oneLine(err.Error())
		}
		if st.only == KindContainer {
			return Choice{KindContainer, "a container", "there is none: " + noContainer}, nil
		}
	}
	bin, err := findBinaries(st)
	var note string
	if noContainer != "" {
		note = "no container: " + noContainer
	}
	switch {
	case err == nil:
		return Choice{KindCluster, fmt.Sprintf("a throwaway cluster (binaries: %s)", bin), note}, nil
	case st.only == KindCluster:
		return Choice{KindCluster, "a throwaway cluster", fmt.Sprintf("%s: %v", st.binariesWhere(), err)}, nil
	}
	return Choice{"", "none", fmt.Sprintf("%s; %s: %v", note, st.binariesWhere(), err)}, nil
}
