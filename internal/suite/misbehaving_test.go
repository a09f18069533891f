package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/failuremsg"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// The child process's environment: which misbehaving adapter to run the
// suite against, and where to write the certificate.
const (
	childAdapterEnv = "HARMLESS_TEST_ADAPTER"
	childCertEnv    = "HARMLESS_TEST_CERT"
	childTest       = "TestMisbehavingChild"
)

// Bounds on a child run. They are generous: they exist so that a harness
// that does hang fails this test instead of hanging it.
const (
	childTimeout = 2 * time.Minute              // the child's -test.timeout
	childLimit   = childTimeout + 1*time.Minute // when the parent kills it
)

// hangTimeout is the delivery timeout of the hang adapter's run. Every
// delivery then costs the timeout and as long again in grace.
const hangTimeout = 500 * time.Millisecond

// factoryFailure is what the factory-error adapter's factory says.
const factoryFailure = "factory-error: cannot build an instance, on purpose"

// misbehaving is one implementation that must not be certified, and what
// the certificate must then say.
type misbehaving struct {
	adapter adapters.Adapter
	opts    []Option
	// failing are the rules that must fail; nil means all of them but
	// those not-supported for what the adapter declares (the retention
	// rules, without a redelivery window).
	failing []string
	// says is what each failing rule's message must mention.
	says string
	// mentions is what some rules' messages must mention besides, by rule.
	mentions map[string]string
}

// never is a channel nothing sends on or closes: the hang adapter's
// deliveries wait on it for ever. It lives only in a child process.
var never = make(chan struct{})

// small keeps the concurrent-delivery fixture short: one round of each kind,
// two contenders.
var small = []Option{WithRounds(1, 1), WithContenders(2)}

// deliverer is an implementation that delivers with a function.
type deliverer func(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error)

func (f deliverer) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	return f(ctx, d)
}

func (deliverer) Close(context.Context) error { return nil }

func delivering(name string, f deliverer) adapters.Adapter {
	return adapters.Adapter{Name: name, New: func(context.Context, adapters.Env) (adapters.Implementation, error) { return f, nil }}
}

var misbehavers = map[string]misbehaving{
	"hang": {
		adapter: delivering("hang", func(context.Context, adapters.Delivery) (adapters.Outcome, error) {
			<-never // ignores its context
			return adapters.Applied, nil
		}),
		// Hung deliveries are slow by design; a short patience keeps the
		// run to a few redeliveries in the first play, and one delivery
		// each after it (the run has answered nothing).
		opts: append([]Option{WithDeliveryTimeout(hangTimeout), WithRedeliveryPatience(time.Second)}, small...),
		says: "hung",
	},
	"panic": {
		adapter: delivering("panic", func(context.Context, adapters.Delivery) (adapters.Outcome, error) {
			panic("the panic adapter panics, on purpose")
		}),
		opts: small,
		says: "panicked",
	},
	"nonsense": {
		adapter: delivering("nonsense", func(context.Context, adapters.Delivery) (adapters.Outcome, error) {
			return adapters.Outcome(42), nil
		}),
		opts: small,
		says: "invalid outcome",
	},
	"always-applied": {
		// Reports Applied and never touches the database: the harness must
		// count the ledger, not believe the report.
		adapter: delivering("always-applied", func(context.Context, adapters.Delivery) (adapters.Outcome, error) {
			return adapters.Applied, nil
		}),
		opts:    small,
		failing: []string{catalogid.DoubleDeliveryOneEffect, catalogid.ConcurrentDeliveryOneEffect, catalogid.ConcurrentDeliveryFailedClaimantNotLost, catalogid.FailureAfterMarkerRetryApplies},
		says:    "applied 0 times",
	},
	"no-policy": {
		// The reference, declaring no conflict policy: it rejects conflicts
		// all the same, but a policy nobody documented is no policy.
		adapter: noPolicy(),
		opts:    small,
		failing: []string{catalogid.ConflictingPayloadConflictDetected},
		says:    "no conflict policy",
	},
	"quotes-the-id": {
		// Never acknowledges, with an error that quotes the whole id: the
		// 1 MiB id of bad-input must not make a megabyte line in the
		// certificate, nor in an excerpt.
		adapter: delivering("quotes-the-id", func(_ context.Context, d adapters.Delivery) (adapters.Outcome, error) {
			return 0, fmt.Errorf("cannot handle id %q now, retry later", d.ID)
		}),
		opts:     small,
		says:     "cannot handle id",
		mentions: map[string]string{catalogid.BadInputExactlyOnceOrRejected: "bytes left out"},
	},
	"factory-error": {
		adapter: adapters.Adapter{Name: "factory-error", New: func(context.Context, adapters.Env) (adapters.Implementation, error) {
			return nil, errors.New(factoryFailure)
		}},
		opts: small,
		says: factoryFailure,
	},
}

// noPolicy is the reference adapter with no conflict policy declared.
func noPolicy() adapters.Adapter {
	a := reference.Adapter()
	a.Name = "no-policy"
	a.Declares.ConflictPolicy = adapters.NoConflictPolicy
	return a
}

// TestMisbehavingChild runs the suite against the adapter named by
// childAdapterEnv and writes the certificate to childCertEnv. It runs only
// in a child process started by TestMisbehavingImplementations.
func TestMisbehavingChild(t *testing.T) {
	runChildSuite(t, childAdapterEnv, "TestMisbehavingImplementations", func(name string) (adapters.Adapter, []Option, bool) {
		m, ok := misbehavers[name]
		return m.adapter, m.opts, ok
	})
}

// runChildSuite is the body of a child test: it runs the suite against the
// case named by the environment variable env, found with lookup, and writes
// the certificate to childCertEnv. Outside a child process of parent it
// skips.
func runChildSuite(t *testing.T, env, parent string, lookup func(name string) (adapters.Adapter, []Option, bool)) {
	name := os.Getenv(env)
	if name == "" {
		t.Skipf("runs only in a child process of %s", parent)
	}
	adapter, opts, ok := lookup(name)
	if !ok {
		t.Fatalf("%s=%q names no case", env, name)
	}
	path := os.Getenv(childCertEnv)
	RunWith(t, append(opts, WithLogf(t.Logf), WithCertificate(func(c certificate.Certificate) {
		if err := c.WriteJSON(path); err != nil {
			t.Errorf("%v", err)
		}
	})), adapter)
}

// TestMisbehavingImplementations runs the whole suite, in a child process
// each, against implementations that hang, panic, answer nonsense, lie about
// applying the effect, cannot be built or declare no conflict policy. Each
// run must complete, fail the rules the misbehaviour breaks with a message
// that says what happened, and never certify.
func TestMisbehavingImplementations(t *testing.T) {
	dsn := pgtest.DSN(t)
	for name, m := range misbehavers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cert, output := runChild(t, dsn, name)
			checkCertificate(t, cert, m)
			if t.Failed() {
				t.Logf("the child's output:\n%s", tail(output, 60))
			}
		})
	}
}

// runChild runs the suite against adapter name in a child process and
// returns its certificate and output. The child must fail (exit code 1) in
// bounded time, without crashing.
func runChild(t *testing.T, dsn, name string) (certificate.Certificate, string) {
	t.Helper()
	cert, output, _ := runTestChild(t, childTest, nil, []string{"HARMLESS_DSN=" + dsn, childAdapterEnv + "=" + name}, 1)
	return cert, output
}

// runTestChild runs test in a child process of this test binary, with args
// added to its flags and env to its environment, and returns the
// certificate the child wrote to childCertEnv, its output and how long it
// ran. The child must end in bounded time, with one of exit codes (0 is a
// passed suite, 1 a failed one), without crashing.
func runTestChild(t *testing.T, test string, args, env []string, codes ...int) (certificate.Certificate, string, time.Duration) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "certificate.json")
	ctx, cancel := context.WithTimeout(t.Context(), childLimit)
	defer cancel()
	args = append([]string{"-test.run=^" + test + "$", "-test.v", "-test.count=1", "-test.timeout=" + childTimeout.String()}, args...)
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), env...), childCertEnv+"="+path)
	cmd.WaitDelay = 10 * time.Second
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	start := time.Now()
	err := cmd.Run()
	elapsed := time.Since(start)
	shown := slices.DeleteFunc(slices.Clone(env), func(v string) bool { return strings.HasPrefix(v, "HARMLESS_DSN=") })
	t.Logf("child run of %s with %s took %s", test, strings.Join(shown, " "), elapsed.Round(time.Millisecond))

	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("the child did not end within %s\n%s", childLimit, tail(output.String(), 60))
	case err == nil && !slices.Contains(codes, 0):
		t.Fatalf("the child passed: the suite certified its adapter\n%s", tail(output.String(), 60))
	case err != nil && (!errors.As(err, &exit) || !slices.Contains(codes, exit.ExitCode())):
		t.Fatalf("the child failed with %v; want exit code %v (1 is a failed suite, 2 a Go panic or test timeout, 66 a data race)\n%s", err, codes, tail(output.String(), 60))
	}
	for _, crash := range []string{"WARNING: DATA RACE", "\npanic: ", "[PANICKED]", "[TIMEDOUT]", "[INTERRUPTED]"} {
		if strings.Contains(output.String(), crash) {
			t.Errorf("the child's output contains %q: the harness itself broke\n%s", crash, tail(output.String(), 60))
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no certificate: %v\n%s", err, tail(output.String(), 60))
	}
	var cert certificate.Certificate
	if err := json.Unmarshal(data, &cert); err != nil {
		t.Fatalf("certificate: %v\n%s", err, data)
	}
	return cert, output.String(), elapsed
}

// checkCertificate checks the certificate of misbehaving m's run: no rule
// may be skipped, and the rules m breaks must fail saying why.
func checkCertificate(t *testing.T, cert certificate.Certificate, m misbehaving) {
	t.Helper()
	if cert.Adapter != m.adapter.Name || cert.Error != "" {
		t.Errorf("certificate of %q with error %q; want one of %q that started", cert.Adapter, cert.Error, m.adapter.Name)
	}
	if cert.Certified {
		t.Errorf("%q is certified", m.adapter.Name)
	}
	if got, want := len(cert.Rules), len(fixtures.Rules()); got != want {
		t.Errorf("the certificate has %d rules; want all %d", got, want)
	}
	failing := map[string]bool{}
	for _, id := range m.failing {
		failing[id] = true
	}
	for _, r := range cert.Rules {
		if r.Verdict == certificate.VerdictSkipped {
			t.Errorf("rule %s was skipped (%s): the run did not go on", r.ID, r.Message)
			continue
		}
		if m.failing != nil && !failing[r.ID] || m.failing == nil && (r.Verdict == certificate.VerdictNotSupported || r.Verdict == certificate.VerdictNotApplicable) {
			continue
		}
		if r.Verdict != certificate.VerdictFail {
			t.Errorf("rule %s: verdict %s; want fail", r.ID, r.Verdict)
		} else if !strings.Contains(r.Message, m.says) {
			t.Errorf("rule %s failed without mentioning %q:\n%s", r.ID, m.says, r.Message)
		}
	}
	for _, r := range cert.Rules {
		if want, ok := m.mentions[r.ID]; ok && !strings.Contains(r.Message, want) {
			t.Errorf("rule %s does not mention %q:\n%s", r.ID, want, r.Message)
		}
	}
	checkBounded(t, cert)
}

// checkBounded checks that no line of a rule's message in cert is longer
// than a certificate allows, and that the excerpt of each stays within its
// lines and each of its lines within its bound.
func checkBounded(t *testing.T, cert certificate.Certificate) {
	t.Helper()
	for _, r := range cert.Rules {
		for line := range strings.SplitSeq(r.Message, "\n") {
			if len(line) > failuremsg.MaxLine {
				t.Errorf("rule %s: a line of %d bytes in the certificate; want at most %d: %.200q…", r.ID, len(line), failuremsg.MaxLine, line)
			}
		}
		ex := r.Excerpt(certificate.ExcerptLines, "see the certificate")
		if n := strings.Count(ex, "\n") + 1; n > certificate.ExcerptLines {
			t.Errorf("rule %s: an excerpt of %d lines; want at most %d:\n%s", r.ID, n, certificate.ExcerptLines, ex)
		}
		for line := range strings.SplitSeq(ex, "\n") {
			if len(line) > excerptLine {
				t.Errorf("rule %s: a line of %d bytes in the excerpt; want at most %d: %q", r.ID, len(line), excerptLine, line)
			}
		}
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// runFixtures is the -test.run flag of a child that runs test and, of the
// suite's rules, only those of the fixtures ids.
func runFixtures(test string, ids ...string) string {
	quoted := make([]string, len(ids))
	for i, id := range ids {
		quoted[i] = regexp.QuoteMeta(id)
	}
	return "-test.run=^" + test + "$/^(" + strings.Join(quoted, "|") + ")$"
}

// runRule is the -test.run flag of a child that runs test and, of the
// suite's rules, only rule id.
func runRule(test, id string) string {
	r, err := fixtures.Lookup(id)
	if err != nil {
		panic(err)
	}
	return "-test.run=^" + test + "$/^" + regexp.QuoteMeta(r.Fixture) + "$/^" + regexp.QuoteMeta(ruleSubtest(r.ID, r.Fixture)) + "$"
}
