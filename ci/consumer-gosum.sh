#!/usr/bin/env bash
# Measures what a consumer pays to import harmless: a module whose test
# imports only suite and adapters, as the README's Go example does, is
# tidied against this checkout, and the modules its go.sum lists are
# counted, with the heavy stacks (testcontainers, moby, gonum/plot,
# progressbar) among them named.
#
#   bash ci/consumer-gosum.sh [CHECKOUT]    (default: this checkout)
set -euo pipefail
checkout=$(cd "${1:-$(dirname "$0")/..}" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
go mod init example.com/consumer >/dev/null 2>&1
cat > consumer_test.go <<'GO'
package consumer

import (
	"testing"

	"github.com/harmless-dev/harmless/adapters"
	"github.com/harmless-dev/harmless/suite"
)

var myAdapter adapters.Adapter

func TestConformance(t *testing.T) { suite.Run(t, myAdapter) }
GO
go mod edit -require github.com/harmless-dev/harmless@v0.0.0 -replace github.com/harmless-dev/harmless="$checkout"
GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1
modules=$(awk '{print $1}' go.sum | sort -u)
total=$(echo "$modules" | grep -c . || true)
built=$(go list -deps -test -f '{{if .Module}}{{.Module.Path}}{{end}}' ./... | sort -u | grep -vc '^example.com/consumer$' || true)
echo "go.sum of a consumer importing suite and adapters: $total modules, $(wc -l < go.sum) lines; $built modules compiled into its test"
for heavy in github.com/testcontainers/ github.com/moby/ github.com/docker/ gonum.org/v1/plot github.com/schollz/progressbar; do
	in_sum=$(echo "$modules" | grep -c "^$heavy" || true)
	in_build=$(go list -deps -test -f '{{if .Module}}{{.Module.Path}}{{end}}' ./... | sort -u | grep -c "^$heavy" || true)
	echo "  $heavy: $in_sum in go.sum, $in_build compiled"
done
