package suite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// budgetChildEnv names, in a child process of TestBudgetRunsOut, the case
// to run.
const budgetChildEnv = "HARMLESS_TEST_BUDGET"

// patientDelay is how long each delivery of the patient adapter takes: far
// within the delivery timeout, so every single delivery is fine.
const patientDelay = 300 * time.Millisecond

// patient is the reference, waiting patientDelay in every delivery.
func patient() adapters.Adapter {
	ref := noPolicy() // any correct adapter will do; this one is at hand
	ref.Name, ref.Declares = "patient", adapters.Declaration{ConflictPolicy: adapters.RejectConflicts}
	inner := ref.New
	ref.New = func(ctx context.Context, env adapters.Env) (adapters.Implementation, error) {
		impl, err := inner(ctx, env)
		if err != nil {
			return nil, err
		}
		return delayed{impl}, nil
	}
	return ref
}

type delayed struct{ adapters.Implementation }

func (d delayed) Deliver(ctx context.Context, del adapters.Delivery) (adapters.Outcome, error) {
	t := time.NewTimer(patientDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	case <-t.C:
	}
	return d.Implementation.Deliver(ctx, del)
}

// TestBudgetChild runs double-delivery against the patient adapter with a
// budget far too small for its eleven deliveries. It runs only in a child
// process started by TestBudgetRunsOut.
func TestBudgetChild(t *testing.T) {
	runChildSuite(t, budgetChildEnv, "TestBudgetRunsOut", func(string) (adapters.Adapter, []Option, bool) {
		return patient(), []Option{func(c *config) { c.budget = 2 * time.Second }}, true
	})
}

// TestBudgetRunsOut: when a play's budget runs out, each of its rules
// fails with the evidence gathered so far (where the play was, the
// deliveries made and pending, the faults fired), never with a bare
// timeout, and the run goes on to the end.
func TestBudgetRunsOut(t *testing.T) {
	cert, output, _ := runTestChild(t, "TestBudgetChild", []string{runFixtures("TestBudgetChild", catalogid.DoubleDelivery)},
		[]string{"HARMLESS_DSN=" + pgtest.DSN(t), budgetChildEnv + "=patient"}, 1)
	for _, r := range cert.Rules {
		if r.Fixture != catalogid.DoubleDelivery {
			continue
		}
		if r.Verdict != certificate.VerdictFail {
			t.Errorf("rule %s: verdict %s; want fail, the budget having run out", r.ID, r.Verdict)
			continue
		}
		for _, want := range []string{"did not finish within its budget of 2s", "it was at redelivery", "deliveries made", "pending; faults fired: none"} {
			if !strings.Contains(r.Message, want) {
				t.Errorf("rule %s failed without saying %q:\n%s", r.ID, want, r.Message)
			}
		}
		if r.ID == catalogid.DoubleDeliveryFirstApplied {
			t.Logf("%s failed with:\n%s", r.ID, r.Message)
		}
		if strings.Contains(r.Message, "timeout occurred") {
			t.Errorf("rule %s reports a bare Ginkgo timeout:\n%s", r.ID, r.Message)
		}
	}
	if t.Failed() {
		t.Logf("the child's output:\n%s", tail(output, 60))
	}
}
