package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/internal/adapters/builtin"
	"github.com/harmless-dev/harmless/internal/docgen"
)

func TestMatrixCommandPrintsTheGeneratedTable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"matrix"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	if stdout.String() != docgen.MatrixTable() {
		t.Errorf("harmless matrix printed:\n%s", stdout.String())
	}
	for _, name := range builtin.Names() {
		if !strings.Contains(stdout.String(), "`"+name+"`") {
			t.Errorf("the matrix lacks adapter %s", name)
		}
	}
}
