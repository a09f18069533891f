package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/adapters/builtin"
	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/docgen"
	"github.com/harmless-dev/harmless/internal/pgtest"
	"github.com/harmless-dev/harmless/suite"
)

// TestMatrixCoversEveryAdapter: the matrix has exactly one row per built-in
// adapter, and every broken adapter is caught by at least one fixture.
func TestMatrixCoversEveryAdapter(t *testing.T) {
	var inMatrix []string
	for _, row := range fixtures.Matrix() {
		inMatrix = append(inMatrix, row.Adapter)
		if strings.HasPrefix(row.Adapter, "broken-") && len(row.MustFail) == 0 {
			t.Errorf("broken adapter %s must fail some fixture", row.Adapter)
		}
		if !strings.HasPrefix(row.Adapter, "broken-") && len(row.MustFail) > 0 {
			t.Errorf("correct adapter %s must pass every fixture", row.Adapter)
		}
		for _, f := range row.MustFail {
			if !slices.ContainsFunc(fixtures.Catalog(), func(c fixtures.Fixture) bool { return c.ID == f }) {
				t.Errorf("adapter %s must fail fixture %q, which does not exist", row.Adapter, f)
			}
		}
	}
	slices.Sort(inMatrix)
	if names := builtin.Names(); !slices.Equal(inMatrix, names) {
		t.Errorf("matrix rows %v; built-in adapters %v", inMatrix, names)
	}
}

func TestMatrixCommandPrintsTheGeneratedTable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"matrix"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	if stdout.String() != docgen.MatrixTable() {
		t.Errorf("harmless matrix printed:\n%s", stdout.String())
	}
	for _, row := range fixtures.Matrix() {
		if !strings.Contains(stdout.String(), "`"+row.Adapter+"`") {
			t.Errorf("the matrix lacks adapter %s", row.Adapter)
		}
	}
}

// TestVerdictMatrix certifies every built-in adapter with the real command
// and compares each verdict with the matrix: correct implementations must
// be certified, broken ones must fail the fixtures the matrix names. Any
// difference fails the build, naming the adapter, the fixture and the rule.
func TestVerdictMatrix(t *testing.T) {
	bin := binary(t)
	dsn := pgtest.DSN(t)
	for _, row := range fixtures.Matrix() {
		t.Run(row.Adapter, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "certificate.json")
			code, stdout, stderr := runCertify(t, bin, nil, "--adapter", row.Adapter, "--dsn", dsn, "--json", path)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("no certificate (exit code %d): %v\nstdout:\n%s\nstderr:\n%s", code, err, stdout, stderr)
			}
			var cert suite.Certificate
			if err := json.Unmarshal(data, &cert); err != nil {
				t.Fatal(err)
			}
			for _, diff := range suite.CompareMatrix(cert, row) {
				t.Error(diff)
			}
			if want := map[bool]int{true: exitCertified, false: exitNotCertified}[cert.Certified]; code != want {
				t.Errorf("exit code %d with certified=%t; want %d", code, cert.Certified, want)
			}
			if t.Failed() {
				t.Logf("stdout:\n%s", stdout)
			}
		})
	}
}
