package provision

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

var timingsRuns = flag.Int("timings-runs", 0, "run TestFormationTimings with this many formations (0 skips it; see ci/failover-timings.sh)")

// TestFormationTimings measures an HA formation's life, -timings-runs
// times: the start until ready, a controlled failover until the first
// write, WaitHealthy, a hard kill until the first write, the rejoin of the
// killed node (WaitHealthy), and Close. It prints each run, then the
// median and the maximum of each figure.
func TestFormationTimings(t *testing.T) {
	if *timingsRuns <= 0 {
		t.Skip("run with -timings-runs N (ci/failover-timings.sh)")
	}
	requireHA(t)
	names := []string{"start", "controlled", "settle", "hard-kill", "rejoin", "teardown"}
	figures := make([][]time.Duration, len(names))
	for run := 1; run <= *timingsRuns; run++ {
		ctx := testCtx(t, 5*time.Minute)
		var got []time.Duration
		measure := func(what string, op func() error) {
			began := time.Now()
			if err := op(); err != nil {
				t.Fatalf("run %d, %s: %v", run, what, err)
			}
			got = append(got, time.Since(began))
		}
		var srv *Server
		measure("start", func() (err error) {
			srv, err = Open(ctx, Options{Only: KindHA, LookupEnv: env()})
			return err
		})
		closeServer(t, srv)
		fm := srv.Formation()
		for _, kind := range []FailoverKind{FailoverControlled, FailoverHardKill} {
			fo, err := fm.Failover(ctx, kind)
			if err != nil {
				t.Fatalf("run %d: %s failover: %v", run, kind, err)
			}
			if p := fo.Problem(); p != "" {
				t.Errorf("run %d: %s", run, fo)
			}
			got = append(got, fo.Writable)
			measure("WaitHealthy", func() error { return fm.WaitHealthy(ctx) })
		}
		measure("Close", func() error { return srv.Close(ctx) })
		line := make([]string, len(names))
		for i, d := range got {
			figures[i] = append(figures[i], d)
			line[i] = fmt.Sprintf("%s %.1fs", names[i], d.Seconds())
		}
		t.Logf("run %d: %s", run, strings.Join(line, ", "))
	}
	for i, name := range names {
		ds := slices.Clone(figures[i])
		slices.Sort(ds)
		t.Logf("%-10s median %.1fs, max %.1fs (%d runs)", name, ds[len(ds)/2].Seconds(), ds[len(ds)-1].Seconds(), len(ds))
	}
}
