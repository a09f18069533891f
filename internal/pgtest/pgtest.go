// Package pgtest gives the harness's own tests a real PostgreSQL server.
//
// The server comes from provision.Open with default options and package
// container's engine: the server
// named by $HARMLESS_DSN or $DATABASE_URL, else a throwaway container, else
// a throwaway cluster from local server binaries (see package provision,
// and $HARMLESS_IMAGE, $HARMLESS_PROVISION). One server is shared by all
// the tests of a test binary; it is opened by the first DSN or Pool call, so
// a binary whose selected tests need no database starts none.
//
// A package whose tests use it should close the server when they end:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// Without that, DSN and Pool still work, but a container or cluster stays
// until the process exits, and is then removed by the next run that opens a
// server (package provision removes the leftovers of dead processes).
//
// Tests share the server, so each should use names of its own (a schema or
// tables named after the test) rather than assume an empty database.
package pgtest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/internal/provision"
	"github.com/harmless-dev/harmless/suite/docker"
	"github.com/jackc/pgx/v5/pgxpool"
)

// openTimeout bounds provisioning: pulling nothing, a container starts in a
// few seconds and a cluster in about two.
const openTimeout = 5 * time.Minute

// shared is the test binary's server. It is test-only process state.
var shared struct {
	once sync.Once
	srv  *provision.Server
	err  error
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pgtest: "+format+"\n", args...)
}

func server() (*provision.Server, error) {
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
		defer cancel()
		shared.srv, shared.err = provision.Open(ctx, provision.Options{Logf: logf, Container: provision.Engine(docker.Start)})
	})
	return shared.srv, shared.err
}

// Main runs the tests of a package, then the cleanups given, and then
// closes the shared server, if a test opened it. Call it from TestMain;
// it does not return.
func Main(m *testing.M, cleanups ...func()) {
	code := m.Run()
	for _, cleanup := range cleanups {
		cleanup()
	}
	if shared.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := shared.srv.Close(ctx); err != nil {
			logf("%v", err)
			if code == 0 {
				code = 1
			}
		}
		cancel()
	}
	os.Exit(code)
}

// DSN returns a superuser connection string for the shared server. It fails
// the test, saying why, when no server can be had.
func DSN(t testing.TB) string {
	t.Helper()
	srv, err := server()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return srv.DSN()
}

// Pool returns a pool on DSN(t), closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PoolOn(t, DSN(t))
}

// PoolOn returns a pool on dsn, closed when the test ends.
func PoolOn(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Owned reports whether the shared server is one the test binary started
// (a container or a throwaway cluster), whose connections are the tests'
// alone, rather than one named by a DSN, which others may be using. It
// fails the test, saying why, when no server can be had.
func Owned(t testing.TB) bool {
	t.Helper()
	srv, err := server()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return srv.Owned()
}

// RaiseParallel raises -test.parallel to n, unless the command line gave
// it or the shared server will be one named by a DSN (which
// provision.Options.Planned tells without starting anything). Call it
// from TestMain, before Main. Tests that certify are mostly waiting for
// the server, a child process or a sleep a fixture plans, so Go's default
// (GOMAXPROCS) leaves a small machine idle; on a server the test binary
// starts, their connections are theirs alone, while on one named by a
// DSN, which others may be using, more runs at once could take the
// connections each run counts on.
func RaiseParallel(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given || n <= runtime.GOMAXPROCS(0) {
		return
	}
	if kind, err := (provision.Options{Container: provision.Engine(docker.Start)}).Planned(); err != nil || kind == provision.KindDSN {
		return
	}
	if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
		panic(err)
	}
}
