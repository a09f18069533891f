// Command harmless certifies that an implementation makes duplicate event
// delivery harmless.
//
// Usage:
//
//	harmless certify --adapter NAME [--dsn DSN] [--label-filter EXPR] [--json FILE] [--junit FILE]
//	harmless list
//	harmless matrix
//	harmless version
//
// certify runs the conformance suite of package suite against a built-in
// adapter and prints one verdict per rule. It exits 0 when the implementation
// is certified (every MUST rule ran and passed, nothing skipped), 1 when it
// is not, and 2 on a usage or environment error such as an unknown adapter or
// no database.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
