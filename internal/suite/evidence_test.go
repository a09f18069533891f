package suite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/adapters/kit"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// evidenceChildEnv names the evidence case a child process runs.
const evidenceChildEnv = "HARMLESS_TEST_EVIDENCE"

// evidenceCase is a broken implementation of one kind (in process, in
// autocommit, hung, crashed) whose failures the harness must explain
// without contradicting what the implementation did: refuted lists what
// its messages must never say, since the implementation never does it.
type evidenceCase struct {
	adapter  adapters.Adapter
	opts     []Option
	fixtures []string
	// failing are rules that must fail, so that the case proves
	// something.
	failing []string
	// refuted are phrases no message of a failing rule may hold: each
	// names a cause the implementation's behaviour rules out.
	refuted []string
}

// The phrases of guesses that evidence can refute, as the messages word
// them.
const (
	saysSwallowed     = "swallowed"
	saysTakenSuccess  = "taken for a success"
	saysClaimStays    = "a claim that stays when its effect does not"
	saysOwnMarker     = "marker committed in a transaction of its own"
	saysRolledBack    = "rolled back ("
	saysNoPolicy      = "no conflict policy is declared"
	saysOrNoPolicy    = "or no policy is declared"
	saysRetryable     = "surfacing as errors a broker retries"
	saysRetryableOld  = "surfacing as retryable errors"
	saysBrokenConnKep = "a broken connection is kept and reused"
)

var evidenceCases = map[string]evidenceCase{
	// A marker committed in autocommit before the effect: the claim stays
	// whatever happens to the effect, and nothing is ever rolled back.
	"autocommit-marker-first": {
		adapter:  autocommitMarkerFirst(),
		opts:     small,
		fixtures: []string{catalogid.FailureAfterMarker, catalogid.ConcurrentDelivery},
		failing:  []string{catalogid.FailureAfterMarkerNotAcknowledged, catalogid.ConcurrentDeliveryFailedClaimantNotLost},
		refuted:  []string{saysSwallowed, saysTakenSuccess, saysRolledBack},
	},
	// The reference, answering Applied whenever its transaction fails: it
	// never answers Duplicate for an event it did not apply.
	"in-process-swallows": {
		adapter:  swallowing(),
		opts:     small,
		fixtures: []string{catalogid.FailureAfterMarker},
		failing:  []string{catalogid.FailureAfterMarkerNotAcknowledged, catalogid.FailureAfterMarkerRetryApplies},
		refuted:  []string{saysClaimStays, saysOwnMarker},
	},
	// The reference, hanging on long or NUL-holding identities until its
	// context ends: it never fails with an error there.
	"hung-on-odd-input": {
		adapter:  hangingOnOddInput(),
		opts:     []Option{WithDeliveryTimeout(time.Second), WithRedeliveryPatience(2 * time.Second)},
		fixtures: []string{catalogid.BadInput},
		failing:  []string{catalogid.BadInputExactlyOnceOrRejected},
		refuted:  []string{saysRetryable, saysRetryableOld},
	},
	// Declares the conflict policy "reject", then never compares payloads.
	"declared-policy-ignored": {
		adapter:  ignoringPayloads(),
		opts:     small,
		fixtures: []string{catalogid.ConflictingPayload},
		failing:  []string{catalogid.ConflictingPayloadConflictDetected},
		refuted:  []string{saysNoPolicy, saysOrNoPolicy},
	},
	// The reference, whose process dies (a panic) when its connection is
	// killed: it acknowledges nothing then.
	"crashes-on-killed-connection": {
		adapter:  crashingOnKilledConnection(),
		opts:     small,
		fixtures: []string{catalogid.FailureAfterMarker},
		failing:  []string{catalogid.FailureAfterMarkerProcessSurvivesKilledConnection},
		refuted:  []string{saysSwallowed, saysTakenSuccess, saysClaimStays, saysBrokenConnKep},
	},
}

// TestEvidenceChild runs the suite against the case named by
// evidenceChildEnv and writes the certificate to childCertEnv. It runs
// only in a child process started by TestMessagesFitTheirEvidence.
func TestEvidenceChild(t *testing.T) {
	runChildSuite(t, evidenceChildEnv, "TestMessagesFitTheirEvidence", func(name string) (adapters.Adapter, []Option, bool) {
		c, ok := evidenceCases[name]
		return c.adapter, c.opts, ok
	})
}

// TestMessagesFitTheirEvidence runs broken implementations of several
// kinds, in a child process each, on the fixtures that catch them, and
// fails when the message of a failing rule states a cause, or guesses at
// one, that what the implementation did rules out.
func TestMessagesFitTheirEvidence(t *testing.T) {
	dsn := pgtest.DSN(t)
	for name, c := range evidenceCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cert, output, _ := runTestChild(t, "TestEvidenceChild", []string{runFixtures("TestEvidenceChild", c.fixtures...)},
				[]string{"HARMLESS_DSN=" + dsn, evidenceChildEnv + "=" + name}, 1)
			if cert.Error != "" {
				t.Fatalf("the run did not start: %s", cert.Error)
			}
			verdicts := map[string]certificate.RuleResult{}
			for _, r := range cert.Rules {
				verdicts[r.ID] = r
			}
			for _, id := range c.failing {
				if r := verdicts[id]; r.Verdict != certificate.VerdictFail {
					t.Errorf("rule %s: verdict %q; want fail, so that its message is judged\n%s", id, r.Verdict, r.Message)
				}
			}
			for _, r := range cert.Rules {
				if r.Verdict != certificate.VerdictFail {
					continue
				}
				for _, phrase := range c.refuted {
					if strings.Contains(r.Message, phrase) {
						t.Errorf("rule %s says %q, which the implementation never does:\n%s", r.ID, phrase, r.Message)
					}
				}
			}
			if t.Failed() {
				t.Logf("the child's output:\n%s", tail(output, 40))
			}
		})
	}
}

// autocommitMarkerFirst claims the event in a statement of its own, in
// autocommit, then applies the effect in a transaction of its own: the
// claim is committed before the effect, and stays when the effect fails.
func autocommitMarkerFirst() adapters.Adapter {
	return adapters.Adapter{
		Name:     "autocommit-marker-first",
		Declares: adapters.Declaration{ConflictPolicy: adapters.RejectConflicts},
		New: func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
			pool, err := kit.Pool(ctx, env.DSN)
			if err != nil {
				return nil, err
			}
			table := kit.Table(env.Schema, "autocommit_markers")
			if err := kit.Setup(ctx, pool, kit.CreateIfMissing(table, `CREATE TABLE `+table+` (namespace text, event_id text, digest bytea, PRIMARY KEY (namespace, event_id))`)); err != nil {
				return nil, err
			}
			return autocommitImpl{pool: pool, table: table, effect: env.Effect}, nil
		},
	}
}

type autocommitImpl struct {
	pool   *pgxpool.Pool
	table  string
	effect adapters.Effect
}

func (a autocommitImpl) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if err := kit.Validate(d.Event); err != nil {
		return 0, err
	}
	digest := kit.Digest(d.Payload)
	var claimed bool
	err := a.pool.QueryRow(ctx, `INSERT INTO `+a.table+` VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING true`, d.Namespace, d.ID, digest).Scan(&claimed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		var stored []byte
		if err := a.pool.QueryRow(ctx, `SELECT digest FROM `+a.table+` WHERE namespace = $1 AND event_id = $2`, d.Namespace, d.ID).Scan(&stored); err != nil {
			return 0, err
		}
		return kit.Classify(stored, digest), nil
	case err != nil:
		return 0, err
	}
	if err := pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error { return a.effect.Apply(ctx, tx, d) }); err != nil {
		return 0, fmt.Errorf("effect: %w", err)
	}
	return adapters.Applied, nil
}

func (a autocommitImpl) Close(context.Context) error {
	a.pool.Close()
	return nil
}

// wrapReference is the reference adapter called name, each instance's
// deliveries going through deliver.
func wrapReference(name string, declares func(*adapters.Declaration), deliver func(ctx context.Context, impl adapters.Implementation, d adapters.Delivery) (adapters.Outcome, error)) adapters.Adapter {
	a := reference.Adapter()
	a.Name = name
	if declares != nil {
		declares(&a.Declares)
	}
	newRef := a.New
	a.New = func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
		impl, err := newRef(ctx, env)
		if err != nil {
			return nil, err
		}
		return wrappedImpl{impl, deliver}, nil
	}
	return a
}

type wrappedImpl struct {
	adapters.Implementation
	deliver func(ctx context.Context, impl adapters.Implementation, d adapters.Delivery) (adapters.Outcome, error)
}

func (w wrappedImpl) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return w.deliver(ctx, w.Implementation, d)
}

func swallowing() adapters.Adapter {
	return wrapReference("in-process-swallows", nil, func(ctx context.Context, impl adapters.Implementation, d adapters.Delivery) (adapters.Outcome, error) {
		outcome, err := impl.Deliver(ctx, d)
		if err != nil && !errors.Is(err, adapters.ErrInvalidInput) {
			return adapters.Applied, nil
		}
		return outcome, err
	})
}

func hangingOnOddInput() adapters.Adapter {
	return wrapReference("hung-on-odd-input", nil, func(ctx context.Context, impl adapters.Implementation, d adapters.Delivery) (adapters.Outcome, error) {
		if len(d.ID) > 1024 || strings.ContainsRune(d.ID, 0) {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return impl.Deliver(ctx, d)
	})
}

func ignoringPayloads() adapters.Adapter {
	return wrapReference("declared-policy-ignored", nil, func(ctx context.Context, impl adapters.Implementation, d adapters.Delivery) (adapters.Outcome, error) {
		outcome, err := impl.Deliver(ctx, d)
		if err == nil && outcome == adapters.Rejected {
			return adapters.Duplicate, nil
		}
		return outcome, err
	})
}

func crashingOnKilledConnection() adapters.Adapter {
	return wrapReference("crashes-on-killed-connection", nil, func(ctx context.Context, impl adapters.Implementation, d adapters.Delivery) (adapters.Outcome, error) {
		outcome, err := impl.Deliver(ctx, d)
		if err != nil && !errors.Is(err, adapters.ErrInvalidInput) && (strings.Contains(err.Error(), "57P01") || strings.Contains(err.Error(), "unexpected EOF") || strings.Contains(err.Error(), "conn closed")) {
			panic(fmt.Sprintf("the process dies on a lost connection, on purpose: %v", err))
		}
		return outcome, err
	})
}
