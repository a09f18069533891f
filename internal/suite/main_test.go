package suite

import (
	"flag"
	"os"
	"testing"

	"github.com/harmless-dev/harmless/internal/pgtest"
)

// TestMain runs the package's tests. A run of the suite against a
// misbehaving adapter happens in a child process of this test binary (see
// TestMisbehavingImplementations), so that what it leaves behind (the
// goroutines of calls that hung, a crashed child's output) ends with it
// and its exit code and output can be judged whole: when
// childAdapterEnv is set, only TestMisbehavingChild runs, whatever -test.run
// says.
func TestMain(m *testing.M) {
	if os.Getenv(childAdapterEnv) != "" {
		flag.Parse()
		if err := flag.Set("test.run", "^"+childTest+"$"); err != nil {
			panic(err)
		}
	}
	pgtest.RaiseParallel(4) // its subtests certify, mostly waiting
	pgtest.Main(m)
}
