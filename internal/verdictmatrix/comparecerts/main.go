// Command comparecerts compares directories of certificates of built-in
// adapters (one NAME.json each, as harmless certify --json writes them),
// rule by rule: each certificate with the registry's entry for its
// adapter, and, given two directories, each rule's verdict in the first
// with its verdict in the second. It is how a refactoring shows that no
// verdict moved:
//
//	go run ./internal/verdictmatrix/comparecerts BEFORE_DIR [AFTER_DIR]
//
// A certificate of a run filtered by fixture (--fixture) is compared on
// the fixtures it played. Each certificate is compared with its entry's
// verdicts on the deployment its database models (--provision ha: a
// replicated formation; any other: one server).
//
// It exits 1 when a certificate differs from its entry or a verdict moved
// that the entry does not allow to vary (MayFail), and 2 on bad input.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/verdictmatrix"
	"github.com/harmless-dev/harmless/suite/certificate"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 || len(args) > 2 {
		fmt.Fprintln(stderr, "usage: comparecerts BEFORE_DIR [AFTER_DIR]")
		return 2
	}
	var sets []map[string]certificate.Certificate
	for _, dir := range args {
		certs, err := load(dir)
		if err != nil {
			fmt.Fprintln(stderr, "comparecerts:", err)
			return 2
		}
		sets = append(sets, certs)
	}
	differ := false
	for i, certs := range sets {
		rules := 0
		for _, name := range slices.Sorted(maps.Keys(certs)) {
			entry, err := builtin.EntryOf(name)
			if err != nil {
				fmt.Fprintf(stderr, "comparecerts: %s: %v\n", args[i], err)
				return 2
			}
			rules += len(certs[name].Rules)
			for _, diff := range verdictmatrix.Compare(certs[name], entry, played(certs[name])...) {
				differ = true
				fmt.Fprintf(stdout, "%s: %s\n", args[i], diff)
			}
		}
		fmt.Fprintf(stdout, "%s: %d certificates, %d verdicts compared with the registry\n", args[i], len(certs), rules)
	}
	if len(sets) == 2 {
		moved, varied, same := 0, 0, 0
		for _, name := range slices.Sorted(maps.Keys(sets[0])) {
			entry, _ := builtin.EntryOf(name) // every name was looked up above
			after, ok := sets[1][name]
			if !ok {
				differ = true
				fmt.Fprintf(stdout, "adapter %s: no certificate in %s\n", name, args[1])
				continue
			}
			verdicts := map[string]certificate.Verdict{}
			for _, r := range after.Rules {
				verdicts[r.ID] = r.Verdict
			}
			for _, r := range sets[0][name].Rules {
				if v, ok := verdicts[r.ID]; !ok || v != r.Verdict {
					if why := entry.MayFail[r.ID]; why != "" && ok {
						varied++
						fmt.Fprintf(stdout, "adapter %s, rule %s: %s before, %s after, as the registry allows: %s\n", name, r.ID, r.Verdict, v, why)
						continue
					}
					moved++
					differ = true
					fmt.Fprintf(stdout, "adapter %s, rule %s: %s before, %s after\n", name, r.ID, r.Verdict, v)
					continue
				}
				same++
			}
		}
		fmt.Fprintf(stdout, "before and after: %d verdicts the same, %d varied as the registry allows, %d moved\n", same, varied, moved)
	}
	if differ {
		return 1
	}
	return 0
}

// played returns the fixtures a run filtered by fixture played (a rule of
// them not skipped), so that only those are compared; nil when the run
// played every fixture.
func played(cert certificate.Certificate) []string {
	var all, ran []string
	for _, r := range cert.Rules {
		if !slices.Contains(all, r.Fixture) {
			all = append(all, r.Fixture)
		}
		if r.Verdict != certificate.VerdictSkipped && !slices.Contains(ran, r.Fixture) {
			ran = append(ran, r.Fixture)
		}
	}
	if len(ran) == len(all) {
		return nil
	}
	return ran
}

// load reads every NAME.json certificate in dir.
func load(dir string) (map[string]certificate.Certificate, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s holds no certificate (*.json)", dir)
	}
	certs := map[string]certificate.Certificate{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var c certificate.Certificate
		if err := json.Unmarshal(data, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if want := strings.TrimSuffix(filepath.Base(p), ".json"); c.Adapter != want {
			return nil, fmt.Errorf("%s: the certificate of %q, not of %q", p, c.Adapter, want)
		}
		certs[c.Adapter] = c
	}
	return certs, nil
}
