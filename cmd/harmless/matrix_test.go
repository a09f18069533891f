package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/fixtures"
	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/docgen"
	"github.com/harmless-dev/harmless/internal/matrix"
)

// TestMatrixCoversEveryAdapter: the matrix has exactly one row per built-in
// adapter, and every broken adapter is caught by at least one fixture.
func TestMatrixCoversEveryAdapter(t *testing.T) {
	var inMatrix []string
	for _, row := range matrix.Rows() {
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
	for _, row := range matrix.Rows() {
		if !strings.Contains(stdout.String(), "`"+row.Adapter+"`") {
			t.Errorf("the matrix lacks adapter %s", row.Adapter)
		}
	}
}
