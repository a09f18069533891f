package suite

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// strictChildEnv names the strict case a child process runs.
const strictChildEnv = "HARMLESS_TEST_STRICT"

// strictCase is a correct implementation that refuses, cleanly, identities
// the reference accepts, and what the certificate must say of it.
type strictCase struct {
	refuse func(adapters.Event) bool
	// says is what the message of each rule named must mention.
	says map[string]string
}

// dottedWords is a namespace convention some implementations enforce.
var dottedWords = regexp.MustCompile(`^[a-z0-9-]+(\.[a-z0-9-]+)*$`)

var strictCases = map[string]strictCase{
	"refuses-empty-namespace": {
		// What a published library does.
		refuse: func(ev adapters.Event) bool { return ev.Namespace == "" },
		says: map[string]string{
			catalogid.BadInputExactlyOnceOrRejected:         "an empty namespace: rejected as invalid input",
			catalogid.NamespaceIsolationUnambiguousIdentity: `refused cleanly, which proves nothing about a merge: "harmless\x00p11"/42`,
		},
	},
	"refuses-all-but-dotted-words": {
		refuse: func(ev adapters.Event) bool { return !dottedWords.MatchString(ev.Namespace) },
		says: map[string]string{
			catalogid.NamespaceIsolationUnambiguousIdentity: `not exposed, because an event holding the separator was refused in every pair that would show them (refusing the separator makes such a join unambiguous): namespace and id joined with "/"`,
			catalogid.IdentityFidelityNamespaceKept:         "refused cleanly",
		},
	},
}

// refusing is the reference, refusing what refuse says as invalid input.
func refusing(name string, refuse func(adapters.Event) bool) adapters.Adapter {
	a := reference.Adapter()
	a.Name = name
	newRef := a.New
	a.New = func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
		impl, err := newRef(ctx, env)
		if err != nil {
			return nil, err
		}
		return refusingImpl{impl, refuse}, nil
	}
	return a
}

type refusingImpl struct {
	adapters.Implementation
	refuse func(adapters.Event) bool
}

func (r refusingImpl) Deliver(ctx context.Context, d adapters.Delivery) (adapters.Outcome, error) {
	if r.refuse(d.Event) {
		return 0, fmt.Errorf("event %s: refused by the convention of this test: %w", d.Event, adapters.ErrInvalidInput)
	}
	return r.Implementation.Deliver(ctx, d)
}

func (r refusingImpl) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	return r.Implementation.(adapters.Purger).Purge(ctx, cutoff)
}

// TestStrictChild runs the suite against the case named by strictChildEnv
// and writes the certificate to childCertEnv. It runs only in a child
// process started by TestStrictImplementations.
func TestStrictChild(t *testing.T) {
	runChildSuite(t, strictChildEnv, "TestStrictImplementations", func(name string) (adapters.Adapter, []Option, bool) {
		c, ok := strictCases[name]
		return refusing(name, c.refuse), nil, ok
	})
}

// identityFixtures are the fixtures that send identities an implementation
// may refuse.
var identityFixtures = []string{catalogid.NamespaceIsolation, catalogid.BadInput, catalogid.IdentityFidelity}

// TestStrictImplementations runs the fixtures that send unusual identities
// against correct implementations that refuse more of them than the
// reference does, in a child process each: a clean refusal is a refusal in
// every rule, so every rule passes and says what was refused.
func TestStrictImplementations(t *testing.T) {
	dsn := pgtest.DSN(t)
	for name, c := range strictCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cert, output, _ := runTestChild(t, "TestStrictChild", []string{runFixtures("TestStrictChild", identityFixtures...)},
				[]string{"HARMLESS_DSN=" + dsn, strictChildEnv + "=" + name}, 0, 1)
			if cert.Error != "" {
				t.Fatalf("the run did not start: %s", cert.Error)
			}
			ran := 0
			for _, r := range cert.Rules {
				if !strings.Contains(strings.Join(identityFixtures, " "), r.Fixture) {
					continue
				}
				ran++
				if r.Verdict != certificate.VerdictPass {
					t.Errorf("rule %s: verdict %s; want pass\n%s", r.ID, r.Verdict, r.Message)
				}
				if says, ok := c.says[r.ID]; ok && !strings.Contains(r.Message, says) {
					t.Errorf("rule %s does not say %q:\n%s", r.ID, says, r.Message)
				}
			}
			if ran == 0 {
				t.Error("no rule of the identity fixtures ran")
			}
			if t.Failed() {
				t.Logf("the child's output:\n%s", tail(output, 60))
			}
		})
	}
}
