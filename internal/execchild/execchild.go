// Package execchild is the child side of the exec protocol written in Go,
// for the harness's own tests: a test binary re-executes itself as an
// external implementation, which either serves the reference Store (over a
// real PostgreSQL server, through the protocol, as any other language
// would) or misbehaves in one precise way.
//
// A test package opts in from its TestMain:
//
//	func TestMain(m *testing.M) {
//		execchild.MaybeServe() // returns unless the process is a child
//		...
//	}
//
// and runs the child with [Command].
package execchild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/exec/protocol"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
	"github.com/harmless-dev/harmless/internal/connstr"
)

// EnvMode names the variable that makes a test binary a child, and how it
// behaves.
const EnvMode = "HARMLESS_EXECCHILD_MODE"

// EnvMaxInFlight names the variable that sets the max_in_flight a child
// declares, 1 to 1024; DefaultMaxInFlight when unset. A child declaring 1
// handles each request before it reads the next line: the plain
// read-a-line, answer-a-line loop most children in any language are.
const EnvMaxInFlight = "HARMLESS_EXECCHILD_MAX_IN_FLIGHT"

// DefaultMaxInFlight is the max_in_flight a child declares unless
// EnvMaxInFlight says otherwise.
const DefaultMaxInFlight = 8

// Modes of the child. Every mode but Reference, OneStatement and
// FromConnection misbehaves on purpose.
const (
	// Reference serves reference.Store through the protocol: correct.
	Reference = "reference"
	// OneStatement claims the event and applies its effect in one
	// statement that commits on its own (autocommit, no BEGIN): a
	// data-modifying CTE inserts the marker and, only when it claimed the
	// event, the effect. Correct, and unlike the reference it opens no
	// transaction block, as a consumer whose driver runs in autocommit
	// (SQLAlchemy's AUTOCOMMIT engine, say).
	OneStatement = "one-statement"
	// CrashOnDeliver writes a last word to stderr and exits with status 3
	// at its first delivery.
	CrashOnDeliver = "crash-on-deliver"
	// Garbage answers deliveries with a line that is not JSON.
	Garbage = "garbage"
	// UnknownOutcome answers deliveries with the outcome "maybe".
	UnknownOutcome = "unknown-outcome"
	// WrongID answers deliveries with an id that was never sent.
	WrongID = "wrong-id"
	// HangOnDeliver never answers a delivery, but answers everything else.
	HangOnDeliver = "hang-on-deliver"
	// StopReading stops reading its stdin after setup.
	StopReading = "stop-reading"
	// LongLine answers deliveries with a line over the length limit.
	LongLine = "long-line"
	// BadVersion chooses a protocol version the harness did not offer.
	BadVersion = "bad-version"
	// HelloError answers hello with an error.
	HelloError = "hello-error"
	// SilentExit exits at once, saying nothing.
	SilentExit = "silent-exit"
	// StrayGrandchild starts a grandchild that holds stdout open, then
	// exits at its first delivery.
	StrayGrandchild = "stray-grandchild"
	// Inconsistent declares another redelivery window in every process but
	// the probe.
	Inconsistent = "inconsistent"
	// IgnoreShutdown answers shutdown but does not exit, except in the
	// probe.
	IgnoreShutdown = "ignore-shutdown"
	// ErrorClasses answers each delivery with the error class named by its
	// event id (transient, invalid_input, payload_conflict, unsupported).
	ErrorClasses = "error-classes"
	// LeakDSN writes, at its first delivery, setup's connection as it
	// came (its password included), the DSN it was given and the password
	// it would connect with (which pgx may take from $PGPASSWORD) to
	// stderr, then crashes with status 3: a careless child, whose stderr
	// the reports quote.
	LeakDSN = "leak-dsn"
	// FromConnection serves the reference, connected with setup's
	// connection alone, never its DSN, as a child whose driver cannot
	// read the DSN does: its hosts and ports in order, user, password,
	// database and every parameter, as keywords.
	FromConnection = "from-connection"
	// NoDrain serves the reference but does not implement the optional
	// request drain, as a child written before drain existed: it answers
	// it "unsupported".
	NoDrain = "no-drain"
	// SetupTransientLater serves the reference, but answers the setup of
	// every process of an instance but the first with the error class
	// transient, as a process started while the server restarts would. It
	// needs EnvMarkDir, where the first process leaves its mark.
	SetupTransientLater = "setup-transient-later"
	// ExitOnLostConnection serves the reference, but when a delivery's
	// connection is terminated by the server (SQLSTATE 57P01
	// admin_shutdown, say) or lost, it writes a Node.js crash report
	// starting with NodeLostConnection to stderr and exits with status 1,
	// as a node-postgres child dies whose checked-out client has no
	// 'error' listener.
	ExitOnLostConnection = "exit-on-lost-connection"
	// LogToStdout serves the reference, but writes a log line to stdout
	// before it handles each delivery, as a Node.js child's console.log
	// would: a protocol violation.
	LogToStdout = "log-to-stdout"
	// CrashThenFailHello crashes as CrashOnDeliver in the first process of
	// each instance; every later process of the instance writes a Node.js
	// crash report starting with NodeConnectRefused to stderr and exits
	// with status 1 before it answers hello, as a child whose supervisor
	// restarts it while its server is away. It needs EnvMarkDir.
	CrashThenFailHello = "crash-then-fail-hello"
	// CrashAtNth serves the reference, but each process writes LastWords
	// to stderr and exits with status 3 at its Nth delivery, N from
	// EnvCrashAt: a child that crashes now and then, which its supervisor
	// restarts, and which is correct while it lives.
	CrashAtNth = "crash-at-nth"
	// WedgeAtNth serves the reference, but each process wedges at its Nth
	// delivery, N from EnvCrashAt: it never answers that delivery nor any
	// later request, and keeps running and reading its stdin, as a child
	// stuck in a deadlock or an endless loop does.
	WedgeAtNth = "wedge-at-nth"
	// CloseStdoutAtNth serves the reference, but at its Nth delivery, N
	// from EnvCrashAt, each process closes its stdout and keeps running
	// and reading its stdin, answering nothing: a child that can never
	// answer again, though it lives.
	CloseStdoutAtNth = "close-stdout-at-nth"
	// AroundTheDSN serves the reference, but connects with the host and
	// port of EnvServer instead of those of the DSN setup gives, as a
	// service configured with an address of its own would: around the
	// wire proxy of the harness, whose faults then cannot reach it.
	AroundTheDSN = "around-the-dsn"
)

// EnvServer names the variable holding the DSN whose host and port
// AroundTheDSN connects to.
const EnvServer = "HARMLESS_EXECCHILD_SERVER"

// EnvCrashAt names the variable holding the N of CrashAtNth, WedgeAtNth
// and CloseStdoutAtNth, from 1; DefaultCrashAt when unset.
const EnvCrashAt = "HARMLESS_EXECCHILD_CRASH_AT"

// DefaultCrashAt is CrashAtNth's N unless EnvCrashAt says otherwise.
const DefaultCrashAt = 50

// The first lines of the crash reports of ExitOnLostConnection and
// CrashThenFailHello.
const (
	NodeLostConnection = "Error: Connection terminated unexpectedly"
	NodeConnectRefused = "Error: connect ECONNREFUSED 127.0.0.1:5432"
)

// StdoutLog is what LogToStdout writes to stdout before it handles a
// delivery, followed by the event id.
const StdoutLog = "handling delivery of event "

// EnvMarkDir names the variable holding the directory where the first
// process of each instance of SetupTransientLater and CrashThenFailHello
// leaves its mark.
const EnvMarkDir = "HARMLESS_EXECCHILD_MARK_DIR"

// LastWords is what CrashOnDeliver writes to stderr before it exits.
const LastWords = "execchild: simulated crash in the middle of a delivery"

// Command returns the shell command that runs this test binary as a child
// in mode.
func Command(mode string) string {
	self, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return EnvMode + "=" + shellQuote(mode) + " exec " + shellQuote(self)
}

// CommandUnderShell returns the shell command that runs this test binary
// as a child in mode, as most commands are written: without exec in
// front, so that /bin/sh (dash, on Debian) runs it as a child of its own
// and waits for it, rather than becoming it.
func CommandUnderShell(mode string) string {
	return strings.Replace(Command(mode), " exec ", " ", 1)
}

// CommandMaxInFlight is [Command] for a child that declares max_in_flight n.
func CommandMaxInFlight(mode string, n int) string {
	return EnvMaxInFlight + "=" + strconv.Itoa(n) + " " + Command(mode)
}

// shellQuote quotes s for /bin/sh: in single quotes, each single quote of
// its own ending the quoted part, escaped, and starting the next.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// MaybeServe runs the child and exits when the process was started as one;
// otherwise it returns at once.
func MaybeServe() {
	mode, ok := os.LookupEnv(EnvMode)
	if !ok {
		return
	}
	maxInFlight, err := maxInFlightOf(os.Getenv(EnvMaxInFlight))
	if err != nil {
		fmt.Fprintln(os.Stderr, "execchild:", err)
		os.Exit(2)
	}
	os.Exit(serve(mode, maxInFlight, os.Stdin, os.Stdout))
}

// maxInFlightOf reads the value of EnvMaxInFlight. A value over the
// protocol's limit is left for the harness to reject at hello, as it
// would any child's.
func maxInFlightOf(value string) (int, error) {
	if value == "" {
		return DefaultMaxInFlight, nil
	}
	n, err := strconv.Atoi(value)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a positive number", EnvMaxInFlight, value)
	}
	return n, nil
}

// crashAt is CrashAtNth's N: EnvCrashAt, or DefaultCrashAt when it is
// unset or not a positive number.
func crashAt() int64 {
	n, err := strconv.ParseInt(os.Getenv(EnvCrashAt), 10, 64)
	if err != nil || n < 1 {
		return DefaultCrashAt
	}
	return n
}

// child is one child process's state.
type child struct {
	mode        string
	maxInFlight int
	out         io.Writer
	outMu       sync.Mutex
	instance    int

	mu     sync.Mutex
	dsn    string // the DSN setup gave
	conn   []byte // setup's connection, as it came
	schema string // the play's schema
	store  *reference.Store
	pool   *pgxpool.Pool
	effect protocol.EffectSpec
	now    atomic.Int64 // latest harness time, Unix ns

	deliveries atomic.Int64 // deliveries received, for CrashAtNth
}

func serve(mode string, maxInFlight int, in io.Reader, out io.Writer) int {
	c := &child{mode: mode, maxInFlight: maxInFlight, out: out}
	c.instance, _ = strconv.Atoi(os.Getenv("HARMLESS_INSTANCE"))
	if mode == SilentExit {
		return 0
	}
	lines := protocol.NewLineReader(in, protocol.MaxRequestBytes)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		line, err := lines.Next()
		if err != nil {
			return 0 // end of input: the harness is gone or done
		}
		req, err := protocol.DecodeRequest(line)
		if err != nil {
			fmt.Fprintln(os.Stderr, "execchild:", err)
			continue
		}
		switch req.Method {
		case protocol.MethodShutdown:
			wg.Wait()
			c.answer(protocol.EncodeResult(req.ID, nil))
			if mode == IgnoreShutdown && c.instance > 0 {
				select {} // the harness must kill it
			}
			if c.pool != nil {
				c.pool.Close()
			}
			return 0
		case protocol.MethodDeliver:
			if maxInFlight == 1 {
				c.deliver(req) // one at a time: the next line waits
				continue
			}
			wg.Go(func() { c.deliver(req) })
		default:
			c.handle(req)
			if mode == StopReading && req.Method == protocol.MethodSetup {
				select {}
			}
		}
	}
}

func (c *child) answer(line []byte, err error) {
	if err != nil {
		panic(err)
	}
	c.outMu.Lock()
	defer c.outMu.Unlock()
	_, _ = c.out.Write(line)
}

func (c *child) handle(req protocol.IncomingRequest) {
	switch req.Method {
	case protocol.MethodHello:
		c.hello(req)
	case protocol.MethodSetup:
		var p protocol.SetupParams
		if err := json.Unmarshal(req.Params, &p); err != nil {
			c.answer(protocol.EncodeError(req.ID, protocol.Transient, err.Error()))
			return
		}
		if c.mode == SetupTransientLater && !c.firstOfInstance() {
			c.answer(protocol.EncodeError(req.ID, protocol.Transient, "the server is restarting (simulated): connection refused"))
			return
		}
		var raw struct {
			Connection json.RawMessage `json:"connection"`
		}
		_ = json.Unmarshal(req.Params, &raw) // it decoded as SetupParams above
		if err := c.setup(p, raw.Connection); err != nil {
			c.answer(protocol.EncodeError(req.ID, protocol.Transient, err.Error()))
			return
		}
		c.answer(protocol.EncodeResult(req.ID, nil))
	case protocol.MethodPurge:
		c.purge(req)
	case protocol.MethodDrain:
		if c.mode == NoDrain {
			c.answer(protocol.EncodeError(req.ID, protocol.Unsupported, "unknown method "+req.Method))
			return
		}
		// The reference Store makes no external effect, so there is never
		// anything to wait for.
		c.answer(protocol.EncodeResult(req.ID, nil))
	default:
		c.answer(protocol.EncodeError(req.ID, protocol.Unsupported, "unknown method "+req.Method))
	}
}

// firstOfInstance reports whether this is the first process of its
// instance to be set up: the one that creates the instance's mark in
// EnvMarkDir.
func (c *child) firstOfInstance() bool {
	mark := filepath.Join(os.Getenv(EnvMarkDir), fmt.Sprintf("instance-%d", c.instance))
	f, err := os.OpenFile(mark, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

func (c *child) hello(req protocol.IncomingRequest) {
	window := 24 * time.Hour
	if c.mode == Inconsistent && c.instance > 0 {
		window = time.Hour
	}
	result := protocol.HelloResult{
		Protocol:       protocol.Version,
		Implementation: protocol.Implementation{Name: "execchild-" + c.mode, Version: "1"},
		Declares:       adapters.Declaration{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: window, AcceptsClock: true},
		MaxInFlight:    c.maxInFlight,
	}
	switch c.mode {
	case BadVersion:
		result.Protocol = 99
	case CrashThenFailHello:
		if !c.firstOfInstance() {
			c.die(nodeConnectRefused)
		}
	case HelloError:
		fmt.Fprintln(os.Stderr, "execchild: refusing to start")
		c.answer(protocol.EncodeError(req.ID, protocol.Transient, "cannot start: no configuration"))
		return
	}
	c.answer(protocol.EncodeResult(req.ID, result))
}

func (c *child) setup(p protocol.SetupParams, conn []byte) error {
	dsn := p.DSN
	if c.mode == FromConnection {
		var err error
		if dsn, err = keywords(p.Connection); err != nil {
			return err
		}
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	if c.mode == AroundTheDSN {
		own, err := pgx.ParseConfig(os.Getenv(EnvServer))
		if err != nil {
			return fmt.Errorf("%s: %w", EnvServer, err)
		}
		cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = own.Host, own.Port, own.Fallbacks
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return err
	}
	store := reference.NewStore(pool, reference.Config{
		Schema: p.Schema,
		Now:    func() time.Time { return time.Unix(0, c.now.Load()).UTC() },
	})
	if err := store.Migrate(context.Background()); err != nil {
		pool.Close()
		return err
	}
	c.mu.Lock()
	c.pool, c.store, c.effect, c.dsn, c.conn, c.schema = pool, store, p.Effect, p.DSN, conn, p.Schema
	c.mu.Unlock()
	return nil
}

// keywords is a keyword/value connection string made of conn alone, as a
// driver that takes keyword parameters (psycopg's, node-postgres's config)
// is given them: every host and port, in order, the user, password and
// database, and every parameter.
func keywords(conn protocol.Connection) (string, error) {
	if len(conn.Hosts) == 0 || len(conn.Ports) != len(conn.Hosts) {
		return "", fmt.Errorf("setup's connection has hosts %q and ports %v: want a port for each of one or more hosts", conn.Hosts, conn.Ports)
	}
	ports := make([]string, len(conn.Ports))
	for i, p := range conn.Ports {
		ports[i] = strconv.Itoa(p)
	}
	settings := []connstr.Setting{
		{Key: "host", Value: strings.Join(conn.Hosts, ",")},
		{Key: "port", Value: strings.Join(ports, ",")},
		{Key: "user", Value: conn.User},
		{Key: "password", Value: conn.Password},
		{Key: "dbname", Value: conn.Database},
	}
	for _, k := range slices.Sorted(maps.Keys(conn.Parameters)) {
		settings = append(settings, connstr.Setting{Key: k, Value: conn.Parameters[k]})
	}
	return connstr.Format(settings), nil
}

// advance moves the child's clock to the harness's time, never backwards.
func (c *child) advance(now *time.Time) {
	if now == nil {
		return
	}
	for {
		old := c.now.Load()
		if now.UnixNano() <= old || c.now.CompareAndSwap(old, now.UnixNano()) {
			return
		}
	}
}

func (c *child) deliver(req protocol.IncomingRequest) {
	var p protocol.DeliverParams
	if err := json.Unmarshal(req.Params, &p); err != nil {
		c.answer(protocol.EncodeError(req.ID, protocol.Transient, err.Error()))
		return
	}
	switch c.mode {
	case CrashOnDeliver, CrashThenFailHello:
		fmt.Fprintln(os.Stderr, LastWords)
		os.Exit(3)
	case CrashAtNth:
		if c.deliveries.Add(1) >= crashAt() {
			fmt.Fprintln(os.Stderr, LastWords)
			os.Exit(3)
		}
	case WedgeAtNth:
		if c.deliveries.Add(1) == crashAt() {
			fmt.Fprintf(os.Stderr, "execchild: wedged at delivery %d (simulated)\n", crashAt())
			c.outMu.Lock() // every answer waits for ever, this one's first
			select {}
		}
	case CloseStdoutAtNth:
		if c.deliveries.Add(1) == crashAt() {
			fmt.Fprintf(os.Stderr, "execchild: closing stdout at delivery %d (simulated)\n", crashAt())
			c.outMu.Lock() // nothing is written to it again
			_ = syscall.Close(1)
			select {}
		}
	case LogToStdout:
		c.answer([]byte(StdoutLog+string(p.EventID)+"\n"), nil)
	case LeakDSN:
		c.mu.Lock()
		dsn, conn := c.dsn, c.conn
		c.mu.Unlock()
		var password string
		if cfg, err := pgx.ParseConfig(dsn); err == nil {
			password = cfg.Password
		}
		fmt.Fprintf(os.Stderr, "execchild: setup's connection: %s\n", conn)
		fmt.Fprintf(os.Stderr, "execchild: connecting to %s\n", dsn)
		fmt.Fprintf(os.Stderr, "panic: cannot deliver %s with password %q\n", p.EventID, password)
		os.Exit(3)
	case StrayGrandchild:
		grandchild := exec.Command("sleep", "300")
		grandchild.Stdout = os.Stdout
		_ = grandchild.Start()
		os.Exit(4)
	case Garbage:
		c.answer([]byte("this is not json\n"), nil)
		return
	case UnknownOutcome:
		c.answer(protocol.EncodeResult(req.ID, protocol.DeliverResult{Outcome: "maybe"}))
		return
	case WrongID:
		c.answer(protocol.EncodeResult(req.ID+1000, protocol.DeliverResult{Outcome: protocol.OutcomeName(adapters.Applied)}))
		return
	case HangOnDeliver:
		return
	case LongLine:
		c.answer([]byte(`{"id":`+strconv.FormatUint(req.ID, 10)+`,"result":{"outcome":"applied","pad":"`+strings.Repeat("x", protocol.MaxAnswerBytes)+`"}}`+"\n"), nil)
		return
	case ErrorClasses:
		c.answer(protocol.EncodeError(req.ID, protocol.ErrorClass(p.EventID), "as asked"))
		return
	}
	c.advance(p.Now)
	ev := adapters.Event{Namespace: string(p.Namespace), ID: string(p.EventID), Payload: p.Payload}
	c.mu.Lock()
	store, effect, pool, schema := c.store, c.effect, c.pool, c.schema
	c.mu.Unlock()
	args, err := effectArgs(effect, p.EffectArgs)
	if err != nil {
		c.answer(protocol.EncodeError(req.ID, protocol.Transient, err.Error()))
		return
	}
	var outcome adapters.Outcome
	if c.mode == OneStatement {
		outcome, err = oneStatement(context.Background(), pool, schema, effect, ev, time.Unix(0, c.now.Load()).UTC(), args)
	} else {
		outcome, err = store.Process(context.Background(), ev, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, effect.SQL, args...)
			return err
		})
	}
	if c.mode == ExitOnLostConnection && lostConnection(err) {
		fmt.Fprintf(os.Stderr, "execchild: the connection of the delivery of %q was lost: %v\n", p.EventID, err)
		c.die(nodeLostConnection)
	}
	switch {
	case err == nil:
		c.answer(protocol.EncodeResult(req.ID, protocol.DeliverResult{Outcome: protocol.OutcomeName(outcome)}))
	case errors.Is(err, adapters.ErrInvalidInput):
		c.answer(protocol.EncodeError(req.ID, protocol.InvalidInput, err.Error()))
	default:
		c.answer(protocol.EncodeError(req.ID, protocol.Transient, err.Error()))
	}
}

// oneStatement claims ev and applies its effect in one autocommitted
// statement: the effect's INSERT ... VALUES becomes an INSERT ... SELECT
// from a CTE that inserts the marker, so the effect is inserted exactly
// when the marker is. An event claimed already is compared by digest, in a
// second statement that only reads.
func oneStatement(ctx context.Context, pool *pgxpool.Pool, schema string, effect protocol.EffectSpec, ev adapters.Event, now time.Time, args []any) (adapters.Outcome, error) {
	if err := adapters.CheckIdentity(ev); err != nil {
		return 0, err
	}
	head, _, ok := strings.Cut(effect.SQL, " VALUES (")
	if !ok {
		return 0, fmt.Errorf("the effect's statement %q is not an INSERT ... VALUES", effect.SQL)
	}
	n := len(effect.Params)
	casts := make([]string, n)
	for i, p := range effect.Params {
		casts[i] = fmt.Sprintf("$%d::%s", i+1, p.Type)
	}
	markers := pgx.Identifier{schema, kit.ProcessedEventsTable}.Sanitize()
	sum := sha256.Sum256(ev.Payload)
	digest := sum[:]
	sql := fmt.Sprintf(`WITH claim AS (
	INSERT INTO %s (namespace, event_id, payload_digest, processed_at) VALUES ($%d, $%d, $%d, $%d)
	ON CONFLICT (namespace, event_id) DO NOTHING RETURNING 1
)
%s SELECT %s FROM claim`, markers, n+1, n+2, n+3, n+4, head, strings.Join(casts, ", "))
	tag, err := pool.Exec(ctx, sql, append(args, ev.Namespace, ev.ID, digest, now)...)
	switch {
	case err != nil:
		return 0, fmt.Errorf("claim and apply %s: %w", ev, err)
	case tag.RowsAffected() == 1:
		return adapters.Applied, nil
	}
	var stored []byte
	err = pool.QueryRow(ctx, `SELECT payload_digest FROM `+markers+` WHERE namespace = $1 AND event_id = $2`, ev.Namespace, ev.ID).Scan(&stored)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, fmt.Errorf("the marker of %s vanished (purged) after the claim found it; redeliver", ev)
	case err != nil:
		return 0, fmt.Errorf("read the marker of %s: %w", ev, err)
	case bytes.Equal(stored, digest):
		return adapters.Duplicate, nil
	}
	return adapters.Rejected, nil
}

// effectArgs decodes the effect's arguments by their declared types.
func effectArgs(effect protocol.EffectSpec, raw []any) ([]any, error) {
	if len(raw) != len(effect.Params) {
		return nil, fmt.Errorf("%d effect arguments for %d parameters", len(raw), len(effect.Params))
	}
	args := make([]any, len(raw))
	for i, p := range effect.Params {
		switch v := raw[i].(type) {
		case string:
			if p.Type == "bytea" {
				b, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					return nil, fmt.Errorf("effect argument %s: %w", p.Name, err)
				}
				args[i] = b
				continue
			}
			args[i] = v
		case float64:
			args[i] = int32(v)
		default:
			return nil, fmt.Errorf("effect argument %s has type %T", p.Name, v)
		}
	}
	return args, nil
}

func (c *child) purge(req protocol.IncomingRequest) {
	var p protocol.PurgeParams
	if err := json.Unmarshal(req.Params, &p); err != nil {
		c.answer(protocol.EncodeError(req.ID, protocol.Transient, err.Error()))
		return
	}
	c.advance(p.Now)
	c.mu.Lock()
	store := c.store
	c.mu.Unlock()
	removed, err := store.Purge(context.Background(), p.Cutoff)
	if err != nil {
		c.answer(protocol.EncodeError(req.ID, protocol.Transient, err.Error()))
		return
	}
	c.answer(protocol.EncodeResult(req.ID, map[string]int64{"removed": removed}))
}

// lostConnection reports whether err says that the connection it was
// returned on is gone: the server terminated it (class 57P, or any FATAL
// error, after which the server closes it) or it was closed or cut. A
// connection that could not be opened is not lost: node-postgres rejects
// the connect call then, which a child handles.
func lostConnection(err error) bool {
	if err == nil {
		return false
	}
	var connect *pgconn.ConnectError
	if errors.As(err, &connect) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "57P") || pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC"
	}
	return errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Crash reports in the style of Node.js 20 with node-postgres 8: the
// unhandled 'error' event of a checked-out client whose connection ends,
// and the unhandled rejection of a connect refused at start.
const (
	nodeLostConnection = `node:events:497
      throw er; // Unhandled 'error' event
      ^

` + NodeLostConnection + `
    at Connection.<anonymous> (/srv/child/node_modules/pg/lib/client.js:136:73)
    at Object.onceWrapper (node:events:634:28)
    at Connection.emit (node:events:520:28)
    at Socket.<anonymous> (/srv/child/node_modules/pg/lib/connection.js:62:12)
    at Socket.emit (node:events:520:28)
    at TCP.<anonymous> (node:net:346:12)
Emitted 'error' event on Client instance at:
    at Client._handleErrorEvent (/srv/child/node_modules/pg/lib/client.js:336:10)
    at Connection.<anonymous> (/srv/child/node_modules/pg/lib/client.js:146:16)
    at Object.onceWrapper (node:events:634:28)
    [... lines matching original stack trace ...]
    at TCP.<anonymous> (node:net:346:12)

Node.js v20.20.2
`
	nodeConnectRefused = `node:internal/process/promises:394
    triggerUncaughtException(err, true /* fromPromise */);
    ^

` + NodeConnectRefused + `
    at /srv/child/node_modules/pg-pool/index.js:45:11
    at process.processTicksAndRejections (node:internal/process/task_queues:105:5)
    at async main (/srv/child/impl.js:12:3) {
  errno: -111,
  code: 'ECONNREFUSED',
  syscall: 'connect',
  address: '127.0.0.1',
  port: 5432
}

Node.js v20.20.2
`
)

// die writes report to stderr and exits with status 1, as Node.js does
// when an error is not handled.
func (c *child) die(report string) {
	c.outMu.Lock() // no answer after the crash
	fmt.Fprint(os.Stderr, report)
	os.Exit(1)
}
