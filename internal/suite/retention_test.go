package suite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// retentionChildEnv names, in a child process of TestRetentionExpiry, the
// case of retentionCases to run the retention-expiry fixture against.
const retentionChildEnv = "HARMLESS_TEST_RETENTION"

// realTimeWindow is the window the real-time cases declare.
const realTimeWindow = 2 * time.Second

// storeImpl is the reference Store as an implementation without a Purge
// method.
type storeImpl struct {
	pool   *pgxpool.Pool
	store  *reference.Store
	effect adapters.Effect
	// drop, when set, is the schema of its own the Store keeps its
	// markers in, dropped when an instance closes: a play closes its
	// instances only when it ends.
	drop string
}

func (c storeImpl) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return c.store.Process(ctx, d.Event, func(ctx context.Context, tx pgx.Tx) error {
		return c.effect.Apply(ctx, tx, d)
	})
}

func (c storeImpl) Close(ctx context.Context) error {
	defer c.pool.Close()
	if c.drop != "" {
		if _, err := c.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+c.drop+` CASCADE`); err != nil {
			return fmt.Errorf("drop %s: %w", c.drop, err)
		}
	}
	return nil
}

// purgingStore is storeImpl with the Store's Purge, its cutoff moved by
// shift; with keep set, it removes nothing.
type purgingStore struct {
	storeImpl
	shift time.Duration
	keep  bool
}

func (c purgingStore) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	if c.keep {
		return 0, nil
	}
	return c.store.Purge(ctx, cutoff.Add(c.shift))
}

// purging is how a storeAdapter purges.
type purging int

const (
	purgeRight   purging = iota // the reference's Purge
	purgeEarly                  // half a window too early, as broken-early-purge
	purgeNothing                // nothing removed, as broken-no-purge
	purgeMissing                // no Purge method
)

// storeAdapter returns an adapter of the reference Store declaring
// declares. Unless it accepts the harness's clock it reads the system
// clock, as most applications do.
func storeAdapter(name string, declares adapters.Declaration, p purging) adapters.Adapter {
	return storeAdapterIn(name, declares, p, false)
}

// ownSchema is the schema of its own that an adapter of storeAdapterIn
// keeps its markers in, for the play whose schema is play: outside the
// play's schema, where the harness counts no row, and shared by the
// play's instances, as a key-value store would be.
func ownSchema(play string) string { return "own_" + play }

// storeAdapterIn is storeAdapter, whose Store keeps its markers in a
// schema of its own (see ownSchema) when own is set.
func storeAdapterIn(name string, declares adapters.Declaration, p purging, own bool) adapters.Adapter {
	return adapters.Adapter{
		Name:     name,
		Declares: declares,
		New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
			pool, err := pgxpool.New(ctx, env.DSN)
			if err != nil {
				return nil, err
			}
			cfg := reference.Config{Schema: env.Schema}
			if own {
				cfg.Schema = ownSchema(env.Schema)
				// Two instances may set up at once.
				create := `DO $own$ BEGIN CREATE SCHEMA IF NOT EXISTS ` + pgx.Identifier{cfg.Schema}.Sanitize() + `;
EXCEPTION WHEN unique_violation OR duplicate_schema THEN NULL; END $own$`
				if _, err := pool.Exec(ctx, create); err != nil {
					pool.Close()
					return nil, err
				}
			}
			if declares.AcceptsClock {
				cfg.Now = env.Clock.Now
			}
			store := reference.NewStore(pool, cfg)
			if err := store.Migrate(ctx); err != nil {
				pool.Close()
				return nil, err
			}
			impl := storeImpl{pool: pool, store: store, effect: env.Effect}
			if own {
				impl.drop = pgx.Identifier{cfg.Schema}.Sanitize()
			}
			switch p {
			case purgeMissing:
				return impl, nil
			case purgeEarly:
				return purgingStore{storeImpl: impl, shift: declares.RedeliveryWindow / 2}, nil
			case purgeNothing:
				return purgingStore{storeImpl: impl, keep: true}, nil
			}
			return purgingStore{storeImpl: impl}, nil
		},
	}
}

// realTime declares window without accepting the harness's clock.
func realTime(window time.Duration) adapters.Declaration {
	return adapters.Declaration{ConflictPolicy: adapters.RejectConflicts, RedeliveryWindow: window}
}

// retentionCase is an adapter the retention-expiry fixture runs against in
// a child process, and the verdict each of its rules must get.
type retentionCase struct {
	adapter adapters.Adapter
	want    map[string]certificate.Verdict
	// says is what the message of every rule that must not pass mentions.
	says string
	// noted maps rules that must say something whatever their verdict to
	// what they must say.
	noted map[string]string
}

// noTable is what the rules that count the implementation's rows say when
// it keeps no table in the play's schema.
const noTable = "keeps no table in the play's schema"

// tableRules are the retention rules that count the implementation's
// rows where it keeps them in the play's schema.
var tableRules = []string{catalogid.RetentionExpiryKeptInsideWindow, catalogid.RetentionExpiryPurgedAfterWindow, catalogid.RetentionExpiryStateBounded}

// saying maps each of ids to says.
func saying(says string, ids ...string) map[string]string {
	m := map[string]string{}
	for _, id := range ids {
		m[id] = says
	}
	return m
}

// retentionVerdicts gives every retention-expiry rule verdict v, except
// those in fail, which must fail.
func retentionVerdicts(v certificate.Verdict, fail ...string) map[string]certificate.Verdict {
	want := map[string]certificate.Verdict{}
	for _, id := range []string{catalogid.RetentionExpiryKeptInsideWindow, catalogid.RetentionExpiryPurgedAfterWindow,
		catalogid.RetentionExpiryConcurrentPurgeSafe, catalogid.RetentionExpiryStateBounded} {
		want[id] = v
	}
	for _, id := range fail {
		want[id] = certificate.VerdictFail
	}
	return want
}

var retentionCases = map[string]retentionCase{
	// Correct, in real time: every rule must pass.
	"reference-realtime": {
		adapter: storeAdapter("reference-realtime", realTime(realTimeWindow), purgeRight),
		want:    retentionVerdicts(certificate.VerdictPass),
	},
	// The bugs of broken-early-purge and broken-no-purge, in real time.
	"early-purge-realtime": {
		adapter: storeAdapter("early-purge-realtime", realTime(realTimeWindow), purgeEarly),
		want:    retentionVerdicts(certificate.VerdictPass, catalogid.RetentionExpiryKeptInsideWindow, catalogid.RetentionExpiryConcurrentPurgeSafe),
		says:    "ended Applied",
	},
	"no-purge-realtime": {
		adapter: storeAdapter("no-purge-realtime", realTime(realTimeWindow), purgeNothing),
		want:    retentionVerdicts(certificate.VerdictPass, catalogid.RetentionExpiryPurgedAfterWindow, catalogid.RetentionExpiryStateBounded),
		says:    "0 removed",
	},
	// A window declared, on the harness's clock, and no way to purge.
	"no-purger": {
		adapter: storeAdapter("no-purger", reference.Adapter().Declares, purgeMissing),
		want:    retentionVerdicts(certificate.VerdictFail),
		says:    "does not implement adapters.Purger",
	},
	// Too long a window to wait out without the harness's clock.
	"long-window-realtime": {
		adapter: storeAdapter("long-window-realtime", realTime(time.Hour), purgeRight),
		want:    retentionVerdicts(certificate.VerdictNotSupported),
		says:    "declares a window of 1h; real-time mode needs a window of at most 10s",
	},
	// The reference's design with its markers in a schema of its own,
	// outside the play's, where the harness counts nothing: judged by its
	// answers alone, it must pass, and say so.
	"own-schema": {
		adapter: storeAdapterIn("own-schema", reference.Adapter().Declares, purgeRight, true),
		want:    retentionVerdicts(certificate.VerdictPass),
		noted:   saying(noTable, tableRules...),
	},
	// The bugs of broken-early-purge and broken-no-purge there: caught by
	// the answers alone.
	"early-purge-own-schema": {
		adapter: storeAdapterIn("early-purge-own-schema", reference.Adapter().Declares, purgeEarly, true),
		want:    retentionVerdicts(certificate.VerdictPass, catalogid.RetentionExpiryKeptInsideWindow, catalogid.RetentionExpiryConcurrentPurgeSafe),
		says:    "ended Applied",
		noted:   saying(noTable, catalogid.RetentionExpiryKeptInsideWindow),
	},
	"no-purge-own-schema": {
		adapter: storeAdapterIn("no-purge-own-schema", reference.Adapter().Declares, purgeNothing, true),
		want:    retentionVerdicts(certificate.VerdictPass, catalogid.RetentionExpiryPurgedAfterWindow, catalogid.RetentionExpiryStateBounded),
		says:    "still recognised",
	},
	"no-window": {
		adapter: storeAdapter("no-window", realTime(0), purgeRight),
		want:    retentionVerdicts(certificate.VerdictNotSupported),
		says:    "declares no redelivery window",
	},
}

// TestRetentionChild runs the suite against the adapter named by
// retentionChildEnv and writes the certificate to childCertEnv. It runs
// only in a child process started by TestRetentionExpiry, which selects
// the retention-expiry fixture with a label filter.
func TestRetentionChild(t *testing.T) {
	runChildSuite(t, retentionChildEnv, "TestRetentionExpiry", func(name string) (adapters.Adapter, []Option, bool) {
		c, ok := retentionCases[name]
		return c.adapter, nil, ok
	})
}

// TestRetentionExpiry runs the retention-expiry fixture, in a child process
// each, against variants of the reference Store: on the system clock with a
// two-second window it must pass in real time, the bugs of
// broken-early-purge and broken-no-purge must be caught in real time too,
// an implementation without Purge must fail every rule saying so, and
// windows that cannot be tested are not-supported, saying why.
func TestRetentionExpiry(t *testing.T) {
	dsn := pgtest.DSN(t)
	for name, c := range retentionCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cert, output, elapsed := runTestChild(t, "TestRetentionChild", []string{runFixtures("TestRetentionChild", catalogid.RetentionExpiry)},
				[]string{"HARMLESS_DSN=" + dsn, retentionChildEnv + "=" + name}, 0, 1)
			t.Logf("the retention-expiry fixture against %s took %s (the child process %s)",
				name, time.Duration(cert.Duration*float64(time.Second)).Round(time.Millisecond), elapsed.Round(time.Millisecond))
			for _, r := range cert.Rules {
				want, ok := c.want[r.ID]
				switch {
				case !ok:
					if r.Verdict != certificate.VerdictSkipped {
						t.Errorf("rule %s of another fixture ran (%s): the label filter did not hold", r.ID, r.Verdict)
					}
				case r.Verdict != want:
					t.Errorf("rule %s: verdict %s; want %s\n%s", r.ID, r.Verdict, want, r.Message)
				case want != certificate.VerdictPass && !strings.Contains(r.Message, c.says):
					t.Errorf("rule %s is %s without saying %q:\n%s", r.ID, r.Verdict, c.says, r.Message)
				case !strings.Contains(r.Message, c.noted[r.ID]):
					t.Errorf("rule %s is %s without saying %q:\n%s", r.ID, r.Verdict, c.noted[r.ID], r.Message)
				}
			}
			if t.Failed() {
				t.Logf("the child's output:\n%s", tail(output, 80))
			}
		})
	}
}
