// Command harmless certifies that an implementation makes duplicate event
// delivery harmless.
//
// Usage:
//
//	harmless certify (--adapter NAME | --exec COMMAND) [--dsn DSN | --provision dsn|container|cluster|ha] [--fixture ID[,ID]]
//	                 [--label-filter EXPR] [--rule ID[,ID]] [--seed N] [--json FILE] [--junit FILE] [--markdown FILE] [-q | -v]
//	harmless soak (--adapter NAME | --exec COMMAND) [--dsn DSN | --provision dsn|container|cluster|ha]
//	              [--duration 60s | --events N] [--seed N] [--json FILE] [--html FILE]
//	harmless list [--json]
//	harmless list (--adapter NAME | --exec COMMAND) [--dsn DSN] [--provision dsn|container|cluster|ha] [--json]
//	harmless matrix
//	harmless version
//	harmless help [COMMAND]
//
// 'harmless help' (or -h) prints the whole usage, 'harmless COMMAND -h' a
// command's flags.
//
// certify runs the conformance suite of package suite against a built-in
// adapter, or against a program in any language that speaks the exec
// protocol (docs/protocol.md, package adapters/exec), and prints one verdict
// per rule. soak delivers a stream of events for a while under every fault
// the database allows (docs/soak.md) and checks the whole history. list
// prints the catalogue of rules, or what applies to an implementation on a
// database; matrix the verdicts the built-in adapters must get.
//
// Exit codes, for certify unless said (docs/reports.md):
//
//	0         certified: every MUST rule ran and passed; soak: clean
//	1         not certified: a MUST rule failed; soak: anomalies found
//	2         a usage or environment error: an unknown adapter, no
//	          database, a program that cannot complete the handshake, an
//	          implementation that never connected through its DSN
//	3         partial: nothing failed, but some MUST rules did not run
//	4         soak: no delivery was acknowledged for too long (no-ack)
//	130, 143  interrupted by SIGINT or SIGTERM, after every cleanup
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/harmless-dev/harmless/internal/reaper"
)

// leftoverTimeout bounds the killing of what a run left running.
const leftoverTimeout = 5 * time.Second

// main runs the command as a child subreaper (package internal/reaper):
// every process the run started stays its descendant, even one that calls
// setsid after its parent exits, and whatever is still running when the
// command ends is killed, so that no process outlives the run.
func main() {
	// Elsewhere than on Linux an orphan goes to init, as before.
	_ = reaper.Adopt()
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	ctx, cancel := context.WithTimeout(context.Background(), leftoverTimeout)
	killed, err := reaper.KillAll(ctx)
	cancel()
	if killed > 0 {
		fmt.Fprintf(os.Stderr, "harmless: killed %d processes the run's programs had left running\n", killed)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "harmless: %v\n", err)
	}
	os.Exit(code)
}
