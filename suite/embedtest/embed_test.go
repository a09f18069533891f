package embedtest_test

import (
	"slices"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/harmless-dev/harmless/adapters/reference"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/adapters/broken/checktheninsert"
	"github.com/harmless-dev/harmless/internal/catalogid"
	"github.com/harmless-dev/harmless/suite"
	"github.com/harmless-dev/harmless/suite/certificate"
)

// What the suite's own nodes saw, in the order they saw it. The database
// comes as for any embedding: $HARMLESS_DSN, else a server the harness
// starts.
var (
	events []string
	certs  = map[string]certificate.Certificate{}
	// atAfterSuite is which certificates had been delivered when the
	// suite's own AfterSuite ran.
	atAfterSuite []string
)

func collect(c certificate.Certificate) {
	events = append(events, "certificate "+c.Adapter)
	certs[c.Adapter] = c
}

var _ = BeforeSuite(func() { events = append(events, "BeforeSuite") })

var _ = AfterSuite(func() {
	events = append(events, "AfterSuite")
	for name := range certs {
		atAfterSuite = append(atAfterSuite, name)
	}
})

var _ = suite.Register(reference.Adapter(), suite.WithCertificate(collect))

// The second adapter is registered inside a container of the suite's own,
// beside its own spec.
var _ = Describe("the embedding suite's own specs", func() {
	It("run beside harmless's", Label("own"), func() { events = append(events, "own spec") })
	suite.Register(checktheninsert.Adapter(), suite.WithCertificate(collect))
})

// filter keeps the run short: one fixture both adapters pass, one the
// broken adapter fails, and the suite's own spec.
var filter = "fixture:" + catalogid.DoubleDelivery + " || fixture:" + catalogid.ConflictingPayload + " || own"

// failRecorder is the testing.T of RunSpecs: the suite must fail, since one
// adapter is broken, and that must not fail this test.
type failRecorder struct{ failed bool }

func (f *failRecorder) Fail() { f.failed = true }

// TestEmbeddedInASuiteWithItsOwnSetup: suite.Register, called for two
// adapters in a Ginkgo suite that has its own BeforeSuite, AfterSuite and
// specs, at package level and inside a container of the suite's, runs both adapters' fixtures; each gets its own certificate, built
// when its container ends (before the suite's AfterSuite), with the right
// verdicts: the reference passes every rule that ran, the broken adapter
// fails conflicting-payload and passes double-delivery.
func TestEmbeddedInASuiteWithItsOwnSetup(t *testing.T) {
	RegisterFailHandler(Fail)
	suiteConfig, reporterConfig := GinkgoConfiguration()
	suiteConfig.LabelFilter = filter
	var rec failRecorder
	passed := RunSpecs(&rec, "an embedding suite", suiteConfig, reporterConfig)
	if passed || !rec.failed {
		t.Errorf("RunSpecs passed (%t, Fail called: %t); want it failed by the broken adapter", passed, rec.failed)
	}
	t.Logf("events: %v", events)
	if len(events) == 0 || events[0] != "BeforeSuite" || events[len(events)-1] != "AfterSuite" || !slices.Contains(events, "own spec") {
		t.Errorf("events %v; want the suite's BeforeSuite first, its own spec, and its AfterSuite last", events)
	}
	slices.Sort(atAfterSuite)
	if want := []string{checktheninsert.Name, reference.Name}; !slices.Equal(atAfterSuite, want) {
		t.Errorf("certificates delivered before the AfterSuite: %v; want %v, each when its container ended", atAfterSuite, want)
	}
	for name, c := range certs {
		t.Logf("%s: %s, %s\n%s", name, c.Status, c.Summary(), c.Table())
		if c.Error != "" || c.Database == "" {
			t.Errorf("%s: error %q, database %q; want a run of its own", name, c.Error, c.Database)
		}
	}

	ref := certs[reference.Name]
	if ref.Status != certificate.StatusPartial {
		t.Errorf("reference: status %s; want partial (the filter left rules out)", ref.Status)
	}
	for _, r := range ref.Rules {
		want := certificate.VerdictSkipped
		if r.Fixture == catalogid.DoubleDelivery || r.Fixture == catalogid.ConflictingPayload {
			want = certificate.VerdictPass
		}
		if r.Verdict != want {
			t.Errorf("reference, rule %s: %s (%s); want %s", r.ID, r.Verdict, r.Message, want)
		}
	}

	broken := certs[checktheninsert.Name]
	if broken.Status != certificate.StatusNotCertified {
		t.Errorf("%s: status %s; want not-certified", checktheninsert.Name, broken.Status)
	}
	failedMust := 0
	for _, r := range broken.Rules {
		switch {
		case r.Fixture == catalogid.DoubleDelivery && r.Verdict != certificate.VerdictPass:
			t.Errorf("%s, rule %s: %s (%s); want pass", checktheninsert.Name, r.ID, r.Verdict, r.Message)
		case r.Fixture == catalogid.ConflictingPayload && r.Verdict == certificate.VerdictFail && r.Level == fixtures.Must:
			failedMust++
		case r.Fixture != catalogid.DoubleDelivery && r.Fixture != catalogid.ConflictingPayload && r.Verdict != certificate.VerdictSkipped:
			t.Errorf("%s, rule %s: %s; want skipped, the filter left it out", checktheninsert.Name, r.ID, r.Verdict)
		}
	}
	if failedMust == 0 {
		t.Errorf("%s: no MUST rule of %s failed; the verdict matrix says it must", checktheninsert.Name, catalogid.ConflictingPayload)
	}
}
