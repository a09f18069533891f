package provision

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// clusterDirPrefix starts the name of every cluster directory, followed
	// by the owner's pid: harmless-pg-<pid>-<random>.
	clusterDirPrefix = "harmless-pg-"
	// ownerFile, in a cluster directory, records the owner and the
	// binaries that made the cluster.
	ownerFile = "owner"
	// clusterStartTimeout bounds `pg_ctl start -w` and the first connection.
	clusterStartTimeout = 60 * time.Second
	// systemBinGlob is where Debian and Ubuntu put the server binaries.
	systemBinGlob = "/usr/lib/postgresql/*/bin"
)

// binariesWhere names the cluster way and where it looks for binaries.
func (st settings) binariesWhere() string {
	if st.binDir != "" {
		return fmt.Sprintf("local server binaries (initdb, pg_ctl in %s=%s)", st.binDirSource, st.binDir)
	}
	return "local server binaries (initdb, pg_ctl on PATH or " + systemBinGlob + ")"
}

// findBinaries returns the directory that holds both initdb and pg_ctl.
func findBinaries(st settings) (string, error) {
	notFound := errors.New("not found")
	if st.binDir != "" {
		if hasServerBinaries(st.binDir) {
			return st.binDir, nil
		}
		return "", notFound
	}
	candidates := filepath.SplitList(st.path)
	system, _ := filepath.Glob(systemBinGlob)
	// Newest major version first: /usr/lib/postgresql/17/bin before 15.
	slices.SortFunc(system, func(a, b string) int { return majorOf(b) - majorOf(a) })
	for _, dir := range append(candidates, system...) {
		if dir != "" && hasServerBinaries(dir) {
			return dir, nil
		}
	}
	return "", notFound
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// runner runs the server binaries, as the postgres user when this process
// is root (initdb and pg_ctl refuse to run as root).
type runner struct {
	cred     *syscall.Credential // nil: as this process
	uid, gid int
}

func clusterRunner() (runner, error) {
	if os.Geteuid() != 0 {
		return runner{uid: -1, gid: -1}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return runner{}, fmt.Errorf("running as root, and initdb refuses root: no postgres user to run it as (%w)", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	var groups []uint32
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.Atoi(id); err == nil {
				groups = append(groups, uint32(g))
			}
		}
	}
	return runner{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}, uid: uid, gid: gid}, nil
}

// command prepares a server binary to run in dir, as the server's user.
func (r runner) command(ctx context.Context, dir, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir // a directory the postgres user can enter
	if r.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.cred}
	}
	return cmd
}

// run runs a server binary in dir and returns its combined output; a
// failure's error includes that output.
func (r runner) run(ctx context.Context, dir, bin string, args ...string) (string, error) {
	cmd := r.command(ctx, dir, bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), args[0], err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// chown gives path to the user the server runs as.
func (r runner) chown(path string) error {
	if r.cred == nil {
		return nil
	}
	return os.Chown(path, r.uid, r.gid)
}

// cluster is a throwaway cluster in its own directory:
//
//	harmless-pg-<pid>-<random>/   0700, the server's user's
//	  owner        who made it (see owner) and bin=<binaries dir>
//	  data/        PGDATA, 0700
//	  socket/      the unix socket .s.PGSQL.<port>, 0700
//	  server.log   the server's log
//
// The modes keep every other local user out of the files and the socket:
// the socket asks for the password as well, but a directory no one else
// can enter is a second wall that does not depend on pg_hba.conf.
type cluster struct {
	bin      string
	dir      string
	as       runner
	port     int
	password string // generated for this cluster; see newPassword
	logf     func(format string, args ...any)
}

// clusterMaxConnections is a throwaway cluster's max_connections: room
// for four runs' plays side by side, at 16 contenders each (a run asks
// for 24 connections per play), beside the connections of their
// instances' pools.
const clusterMaxConnections = 400

// Parts of a cluster directory.
const (
	clusterDataDir   = "data"
	clusterSocketDir = "socket"
	clusterLogFile   = "server.log"
	// clusterPwFile holds the password for initdb --pwfile, only while
	// initdb runs.
	clusterPwFile = "pwfile"
)

func (c *cluster) data() string      { return filepath.Join(c.dir, clusterDataDir) }
func (c *cluster) socketDir() string { return filepath.Join(c.dir, clusterSocketDir) }
func (c *cluster) logFile() string   { return filepath.Join(c.dir, clusterLogFile) }
func (c *cluster) pgCtl() string     { return filepath.Join(c.bin, "pg_ctl") }

func (c *cluster) dsn() string {
	return (&url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(superuser, c.password),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/postgres",
		RawQuery: "sslmode=disable",
	}).String()
}

func (c *cluster) describe() string { return "throwaway cluster in " + c.dir }

// openCluster starts a throwaway cluster from local server binaries.
func openCluster(ctx context.Context, st settings) (srv *Server, err error) {
	bin, err := findBinaries(st)
	if err != nil {
		return nil, err
	}
	as, err := clusterRunner()
	if err != nil {
		return nil, err
	}
	password, err := newPassword()
	if err != nil {
		return nil, err
	}
	began := time.Now()
	// MkdirTemp makes it 0700.
	dir, err := os.MkdirTemp(st.serverDir, fmt.Sprintf("%s%d-", clusterDirPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("create cluster directory: %w", err)
	}
	c := &cluster{bin: bin, dir: dir, as: as, password: password, logf: st.logf}
	defer func() {
		if err != nil {
			if cerr := c.close(context.WithoutCancel(ctx)); cerr != nil {
				st.logf("cleaning up after a failed start: %v", cerr)
			}
		}
	}()
	info := append(self().marshal(), "bin="+bin+"\n"...)
	if err := os.WriteFile(filepath.Join(dir, ownerFile), info, 0o644); err != nil {
		return nil, fmt.Errorf("write owner file: %w", err)
	}
	if err := os.Mkdir(c.socketDir(), 0o700); err != nil {
		return nil, fmt.Errorf("create the socket directory: %w", err)
	}
	for _, p := range []string{dir, c.socketDir()} {
		// 0700 whatever the umask made of it.
		if err := os.Chmod(p, 0o700); err != nil {
			return nil, fmt.Errorf("make %s private: %w", p, err)
		}
		if err := as.chown(p); err != nil {
			return nil, fmt.Errorf("give %s to the postgres user: %w", p, err)
		}
	}
	st.logf("starting throwaway cluster in %s (binaries: %s)", dir, bin)

	fromTemplate := true
	if err := c.initFromTemplate(ctx); err != nil {
		st.logf("no template for the cluster (%v): running initdb", err)
		if err := os.RemoveAll(c.data()); err != nil {
			return nil, fmt.Errorf("remove what the template left: %w", err)
		}
		if err := c.initdb(ctx); err != nil {
			return nil, err
		}
		fromTemplate = false
	}
	// password_encryption is scram-sha-256 by default from PostgreSQL 14
	// on; older servers need it said, so that a password set later (ALTER
	// ROLE ... PASSWORD) is not stored as md5.
	//
	// max_connections is raised from 100 to clusterMaxConnections: the
	// server is the run's alone, and several runs may share one (a test
	// binary's, see internal/pgtest).
	//
	// dynamic_shared_memory_type is mmap, whose segments are files in the
	// data directory, rather than posix, whose segments are files in
	// /dev/shm that a crashed server never removes: each crash harmless
	// made left up to 1 MB there until the machine restarted.
	conf := fmt.Sprintf("\n# harmless throwaway cluster\nlisten_addresses = '127.0.0.1'\n"+
		"unix_socket_directories = '%s'\npassword_encryption = 'scram-sha-256'\nfsync = off\nmax_connections = %d\n"+
		"dynamic_shared_memory_type = mmap\n", c.socketDir(), clusterMaxConnections)
	if err := appendFile(filepath.Join(c.data(), "postgresql.conf"), conf); err != nil {
		return nil, fmt.Errorf("configure cluster: %w", err)
	}
	version, err := c.start(ctx)
	if err != nil {
		return nil, err
	}
	how := "initdb"
	if fromTemplate {
		how = "a template"
	}
	st.logf("cluster ready in %.1fs on 127.0.0.1:%d (PostgreSQL %s), made from %s", time.Since(began).Seconds(), c.port, version, how)
	return &Server{Kind: KindCluster, Version: version, dsn: c.dsn(), b: c, logf: st.logf, secrets: []string{password}}, nil
}

// initdb creates the cluster with the generated password for the
// superuser and SCRAM-SHA-256 for every connection, TCP and the unix
// socket alike: nothing is trusted.
func (c *cluster) initdb(ctx context.Context) error {
	return initdbPrivate(ctx, c.as, c.bin, c.dir, c.data(), filepath.Join(c.dir, clusterPwFile), c.password, "scram-sha-256")
}

// initdbPrivate creates a cluster in data whose superuser has password and
// whose pg_hba.conf asks for it by SCRAM-SHA-256 on every TCP line, and
// says localAuth on the unix socket: initdb's default, trust, never
// appears. The password reaches initdb through a file only the server's
// user can read, pwfile in the private directory dir, removed as soon as
// initdb is done.
func initdbPrivate(ctx context.Context, as runner, bin, dir, data, pwfile, password, localAuth string) (err error) {
	f, err := os.OpenFile(pwfile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create the password file: %w", err)
	}
	defer func() {
		if rerr := os.Remove(pwfile); rerr != nil && err == nil {
			err = fmt.Errorf("remove the password file: %w", rerr)
		}
	}()
	_, err = f.WriteString(password + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write the password file: %w", err)
	}
	if err := as.chown(pwfile); err != nil {
		return fmt.Errorf("give the password file to the postgres user: %w", err)
	}
	_, err = as.run(ctx, dir, filepath.Join(bin, "initdb"),
		"-D", data, "-U", superuser, "--pwfile="+pwfile,
		"--auth-host=scram-sha-256", "--auth-local="+localAuth,
		"-E", "UTF8", "--no-locale", "--no-sync")
	return err
}

func appendFile(name, text string) error {
	f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// start starts the server on c.port if it is set and free, else on a free
// port, and waits until it accepts connections. A port taken between
// choosing and binding it is retried with another.
func (c *cluster) start(ctx context.Context) (string, error) {
	const attempts = 3
	for i := 1; ; i++ {
		if c.port == 0 || i > 1 {
			port, err := freePort()
			if err != nil {
				return "", err
			}
			c.port = port
		}
		logStart := fileSize(c.logFile())
		_, err := c.as.run(ctx, c.dir, c.pgCtl(), "start", "-w", "-t", strconv.Itoa(int(clusterStartTimeout.Seconds())),
			"-D", c.data(), "-l", c.logFile(), "-o", fmt.Sprintf("-p %d", c.port))
		if err == nil {
			break
		}
		log := c.logSince(logStart)
		if i < attempts && strings.Contains(log, "could not bind") {
			c.logf("port %d was taken; trying another", c.port)
			continue
		}
		return "", fmt.Errorf("%w; server log: %s", err, lastLines(log, 10))
	}
	return waitReady(ctx, c.dsn(), clusterStartTimeout, func() string {
		return "server log: " + lastLines(c.logSince(0), 10)
	})
}

func fileSize(name string) int64 {
	fi, err := os.Stat(name)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince returns the server log from byte offset off.
func (c *cluster) logSince(off int64) string {
	f, err := os.Open(c.logFile())
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, off, 1<<20))
	return string(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func (c *cluster) running() bool {
	_, err := os.Stat(filepath.Join(c.data(), "postmaster.pid"))
	return err == nil
}

func (c *cluster) crash(ctx context.Context) error {
	_, err := c.as.run(ctx, c.dir, c.pgCtl(), "stop", "-w", "-m", "immediate", "-D", c.data())
	return err
}

func (c *cluster) restart(ctx context.Context) (string, error) {
	if c.running() {
		return "", errors.New("the server is running: Crash it first")
	}
	if _, err := c.start(ctx); err != nil {
		return "", err
	}
	return c.dsn(), nil
}

// close stops the server if it runs and removes the directory.
func (c *cluster) close(ctx context.Context) error {
	return stopAndRemoveCluster(ctx, c.dir, c.bin, c.as)
}

// stopAndRemoveCluster stops the server of a cluster directory with
// `pg_ctl stop -m immediate` if it runs (the data is thrown away), kills
// whatever is left of it, then removes the directory.
//
// A postmaster is asked to stop only while it is alive (postmasterOf): a
// run abandoned in the middle of its server's shutdown (a second signal)
// leaves a postmaster.pid naming a postmaster that has exited, or one
// that is a zombie nobody reaps, which pg_ctl takes for a server still
// shutting down, and waits for in vain. What such a run left (a backend
// still exiting, a postmaster killed outright) is killed by the
// directory's processes (killAllIn), which no pg_ctl knows of.
func stopAndRemoveCluster(ctx context.Context, dir, bin string, as runner) error {
	data := filepath.Join(dir, clusterDataDir)
	if postmasterOf(data) != 0 {
		if bin == "" || !hasServerBinaries(bin) {
			return fmt.Errorf("%s has a running server and no pg_ctl to stop it with: left in place", dir)
		}
		// A server that stopped meanwhile is fine too.
		out, err := as.run(ctx, dir, filepath.Join(bin, "pg_ctl"), "stop", "-w", "-m", "immediate", "-D", data)
		if err != nil && !strings.Contains(out, "Is server running?") && !strings.Contains(out, "No such process") {
			return err
		}
	}
	if left := killAllIn(ctx, dir, as.serverUID(), []string{data}, haKillTimeout); len(left) > 0 {
		return fmt.Errorf("%s: processes %v of its server are still alive: left in place", dir, left)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// cleanLeftoverClusters removes the cluster directories, in any of
// leftoverParents, whose owner is dead, stopping their servers first.
// Failures are logged, not returned: they must not keep this run from
// starting.
func cleanLeftoverClusters(ctx context.Context, st settings) {
	dirs := globLeftovers(clusterDirPrefix)
	for _, dir := range dirs {
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			continue
		}
		o, bin, marked := clusterOwner(dir)
		if !o.dead() {
			continue
		}
		if !marked {
			// No owner file: either a run killed between creating the
			// directory and writing the file, which left it empty, or a
			// directory that is not harmless's at all. Only the empty one
			// is removed.
			if err := os.Remove(dir); err == nil {
				st.logf("removed empty leftover cluster directory %s of dead process %d", dir, o.pid)
			} else if !errors.Is(err, fs.ErrNotExist) {
				st.logf("left %s in place: it has no owner file and is not empty, so it is not a cluster of harmless's", dir)
			}
			continue
		}
		if bin == "" {
			bin, _ = findBinaries(st)
		}
		as, err := clusterRunner()
		if err == nil {
			err = stopAndRemoveCluster(ctx, dir, bin, as)
		}
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				st.logf("leftover cluster of dead process %d: %v", o.pid, err)
			}
			continue
		}
		st.logf("removed leftover cluster %s of dead process %d", dir, o.pid)
	}
}

// clusterOwner reads the owner of a cluster directory from its owner file
// (marked), or, while that is not written yet, from the pid in its name.
func clusterOwner(dir string) (o owner, bin string, marked bool) {
	return dirOwner(dir, clusterDirPrefix)
}

// dirOwner reads the owner of a directory named prefix<pid>-<random> from
// its owner file (marked), or, while that is not written yet, from the pid
// in its name; bin is the owner file's bin= line.
func dirOwner(dir, prefix string) (o owner, bin string, marked bool) {
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		rest := strings.TrimPrefix(filepath.Base(dir), prefix)
		pid, _ := strconv.Atoi(strings.SplitN(rest, "-", 2)[0])
		return owner{pid: pid}, "", false
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("bin=")); ok {
			bin = string(v)
		}
	}
	return parseOwner(b), bin, true
}

// serverUID is the user the server's processes run as.
func (r runner) serverUID() int {
	if r.cred != nil {
		return r.uid
	}
	return os.Geteuid()
}
