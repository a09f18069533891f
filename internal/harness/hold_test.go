package harness_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harmless-dev/harmless/internal/harness"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/internal/provision"
)

// A play stopped between HoldWrites and Release, as an interrupt stops
// one, must still close: Close releases the hold before it drops the
// schema, which would otherwise wait behind the hold's own lock, and the
// run's pool gets its connection back, so that closing the run does not
// wait for it either. Without the release Close fails after the drop's
// lock timeout, and Run.Close after its own.
func TestCloseReleasesAWriteHoldLeftTaken(t *testing.T) {
	t.Parallel()
	run, err := harness.Start(t.Context(), harness.Options{DeliveryTimeout: ampleTimeout, Provision: provision.Options{DSN: pgtest.DSN(t)}})
	if err != nil {
		t.Fatalf("start run: %v", err)
	}
	play, err := run.NewPlay(t.Context(), delivering("holds", nil))
	if err != nil {
		t.Fatalf("new play: %v", err)
	}
	table := pgx.Identifier{play.Schema(), "markers"}.Sanitize()
	if _, err := run.Admin().Exec(t.Context(), `CREATE TABLE `+table+` (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	holdCtx, cancel := context.WithCancel(t.Context())
	h, err := play.HoldWrites(holdCtx)
	if err != nil || h == nil {
		t.Fatalf("hold writes: %v (hold %v)", err, h)
	}
	cancel() // the interrupt: the play never gets to Release

	started := time.Now()
	if err := play.Close(t.Context()); err != nil {
		t.Errorf("close the play: %v", err)
	}
	if err := run.Close(t.Context()); err != nil {
		t.Errorf("close the run: %v", err)
	}
	t.Logf("closed in %s", time.Since(started).Round(time.Millisecond))
	if schemaExists(t, pgtest.Pool(t), play.Schema()) {
		t.Errorf("schema %s survived a play closed with its write hold taken", play.Schema())
	}
}
