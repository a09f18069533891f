package suite

import (
	"flag"
	"os"
	"testing"

	"github.com/harmless-dev/harmless/internal/pgtest"
)

// TestMain runs the package's tests. Ginkgo allows one RunSpecs per process,
// so a run of the suite against a misbehaving adapter happens in a child
// process of this test binary (see TestMisbehavingImplementations): when
// childAdapterEnv is set, only TestMisbehavingChild runs, whatever -test.run
// says.
func TestMain(m *testing.M) {
	if os.Getenv(childAdapterEnv) != "" {
		flag.Parse()
		if err := flag.Set("test.run", "^"+childTest+"$"); err != nil {
			panic(err)
		}
	}
	pgtest.Main(m)
}
