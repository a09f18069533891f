package faultplan_test

import (
	"testing"

	"github.com/harmless-dev/harmless/internal/pgtest"
)

// TestMain closes the test server, should the tests have started one.
func TestMain(m *testing.M) { pgtest.Main(m) }
