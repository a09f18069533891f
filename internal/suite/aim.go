package suite

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/harmless-dev/harmless/faults/pgproxy"
	"github.com/harmless-dev/harmless/internal/harness"
)

// This file says when a fault planned on the wire could not be aimed at
// the implementation at all. Every instance connects through listeners of
// its own on the play's wire proxy (see harness.ProxyClient): that is how
// the proxy tells its connections, whatever they call themselves. An
// implementation that ignores the host and port of the DSN it is given
// and connects to the server directly is out of the proxy's reach: a cut
// planned there never fires, through no fault of the implementation's,
// and proves nothing either way.

// connectThroughDSN is what an implementation must do for the faults on
// the wire to reach it, as the messages say it.
const connectThroughDSN = "connect with the host and port of the DSN it is given (adapters.Env.DSN; dsn in the exec protocol's setup), each of its hosts in order, rather than with an address of its own configuration"

// notAimed says why fault, planned on instance n's connections, could not
// be aimed at the implementation in play: the proxy saw none of instance
// n's statements in the play, and yet the play's ledger holds effects, so
// the implementation wrote them through a connection made some other way.
// It returns "" when the fault fired, when the proxy saw instance n's
// statements (the fault could reach it), or when the ledger holds no
// effect at all (the implementation did nothing in the database, through
// the proxy or around it): what the deliveries did is then the
// implementation's to answer for. The reason is a not-supported one:
// never the implementation's failure. Only instance n delivers in the
// plays that call it.
func notAimed(ctx context.Context, play *harness.Play, fault *pgproxy.Fault, n int) string {
	if fired, err := fault.Fired(ctx); err != nil || fired > 0 {
		return ""
	}
	seen := play.Proxy().Seen(n)
	if seen.Statements() > 0 {
		return ""
	}
	effects, err := play.AllEffects(ctx)
	if err != nil || len(effects) == 0 {
		return ""
	}
	var addrs []string
	for _, l := range play.Proxy().Listeners(n) {
		addrs = append(addrs, l.Addr())
	}
	return fmt.Sprintf("inconclusive: the planned fault (%s) could not be aimed at the implementation: the wire proxy between it and the server saw %s of instance %d through its listeners (%s) in this play, while the ledger got %d %s through a connection made some other way, so nothing of what the deliveries did passed where the fault waited. Instance %d must %s: a connection made around the proxy is out of reach of every fault harmless plans on the wire",
		fault, seenSummary(seen), n, strings.Join(addrs, ", "), len(effects), plural(len(effects), "effect", "effects"), n, connectThroughDSN)
}

// seenSummary says what the proxy saw of a client, e.g. "no connection",
// or "2 connections (application names "a", "b") and no statement".
func seenSummary(seen pgproxy.Seen) string {
	if seen.Opened == 0 {
		return "no connection"
	}
	names := "carrying no application_name"
	if len(seen.ApplicationNames) > 0 {
		names = fmt.Sprintf("with application names %q", seen.ApplicationNames)
	}
	stmts := "and no statement"
	if n := seen.Statements(); n > 0 {
		stmts = fmt.Sprintf("and %d statements (%d in transaction blocks, %d in autocommit)", n, seen.InTransaction, seen.Autocommit)
	}
	return fmt.Sprintf("%d %s %s %s", seen.Opened, plural(seen.Opened, "connection", "connections"), names, stmts)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// ErrUnreachable marks a run whose implementation acknowledged deliveries
// and applied effects without ever connecting through the DSN it was
// given: no fault on the wire could reach it, so the run cannot judge what
// it claims to. The
// certificate's Error says so, and the command exits 2, as for a run that
// could not start.
var ErrUnreachable = errors.New("the faults could not reach the implementation")

// unreachable returns an error wrapping ErrUnreachable when the run
// acknowledged deliveries and its ledgers got effects, and yet no instance
// of any play ever connected through its listeners on the play's proxy;
// nil otherwise. An implementation that acknowledges deliveries without
// writing anything at all is not out of reach: its rules fail on what it
// did.
func unreachable(run *harness.Run) error {
	if run == nil || !run.Acknowledged() || !run.EffectsApplied() || run.ConnectedThroughProxy() {
		return nil
	}
	return fmt.Errorf("%w: it acknowledged deliveries and applied their effects, but none of its instances ever connected through the DSN it was given, so it connects to the server some other way, out of reach of every fault harmless plans on the wire; it must %s", ErrUnreachable, connectThroughDSN)
}
