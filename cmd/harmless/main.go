// Command harmless certifies that an implementation makes duplicate event
// delivery harmless.
//
// Usage:
//
//	harmless certify (--adapter NAME | --exec COMMAND) [--dsn DSN] [--label-filter EXPR] [--fixture ID[,ID]]
//	                 [--rule ID[,ID]] [--seed N] [--json FILE] [--junit FILE] [--markdown FILE] [-q | -v]
//	harmless soak (--adapter NAME | --exec COMMAND) [--duration 60s | --events N] [--seed N] [--json FILE] [--html FILE]
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
// per rule. It exits 0 when the implementation is certified (every MUST rule
// ran and passed, nothing skipped), 1 when it is not, and 2 on a usage or
// environment error such as an unknown adapter, no database, or a program
// that cannot complete the protocol's handshake. docs/reports.md describes
// its outputs.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
