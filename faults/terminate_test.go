package faults_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/harmless-dev/harmless/faults"
	"github.com/harmless-dev/harmless/internal/pgtest"
)

func TestTerminateBackendsKillsOnlyTaggedConnections(t *testing.T) {
	pool := setup(t).pool
	run := "harmless-faults-test-" + unique(t)
	victim := connect(t, run+"-victim")
	otherRun := connect(t, "harmless-faults-test-"+unique(t))
	bystander := connect(t, "")

	pids, err := faults.TerminateBackends(t.Context(), pool, run)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{int(victim.PgConn().PID())}; !slices.Equal(pids, want) {
		t.Errorf("terminated %v, want %v", pids, want)
	}
	wantDead(t, pool, victim, victim.PgConn().PID(), victim.Ping(t.Context()))
	if !alive(t, bystander) {
		t.Error("the untagged bystander connection died")
	}
	if !alive(t, otherRun) {
		t.Error("another run's connection died")
	}
}

func TestTerminateBackendsSparesItsCaller(t *testing.T) {
	run := "harmless-faults-test-" + unique(t)
	self := connect(t, run+"-self")
	pids, err := faults.TerminateBackends(t.Context(), self, run)
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != 0 {
		t.Errorf("terminated %v, want none", pids)
	}
	if !alive(t, self) {
		t.Error("the caller's own connection died")
	}
}

func TestTerminateBackendsMatchesThePrefixLiterally(t *testing.T) {
	pool := setup(t).pool
	tests := []struct {
		name        string
		appName     string // after the run's tag
		prefix      string // after the run's tag
		terminating bool
	}{
		{"underscore is not a wildcard", "Ax-1", "_x", false},
		{"percent is not a wildcard", "abc", "%", false},
		{"backslash is not an escape", `_x`, `\_x`, false},
		{"underscore matches itself", "_x-1", "_x", true},
		{"percent matches itself", "%-1", "%", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := "harmless-t" + unique(t)
			conn := connect(t, run+tt.appName)
			pids, err := faults.TerminateBackends(t.Context(), pool, run+tt.prefix)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(pids) == 1; got != tt.terminating || len(pids) > 1 {
				t.Errorf("prefix %q on %q terminated %v, want terminated: %v", run+tt.prefix, run+tt.appName, pids, tt.terminating)
			}
			if got := alive(t, conn); got == tt.terminating {
				t.Errorf("connection %q alive: %v, want %v", run+tt.appName, got, !tt.terminating)
			}
		})
	}
}

func TestTerminateBackendsRefusesForeignPrefixes(t *testing.T) {
	pool := setup(t).pool
	tests := []struct{ prefix, want string }{
		{"", "empty prefix"},
		{"app-", `does not start with "harmless-"`},
		{"HARMLESS-x", `does not start with "harmless-"`},
		{" harmless-x", `does not start with "harmless-"`},
		{"harmless-", "every run's connections"},
		{"harmless-" + strings.Repeat("x", 60), "longer than the 63 bytes"},
	}
	for _, tt := range tests {
		pids, err := faults.TerminateBackends(t.Context(), pool, tt.prefix)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("TerminateBackends(%q) = %v, %v; want an error saying %q", tt.prefix, pids, err, tt.want)
		}
	}
}

// TestTerminateBackendsSparesOtherRoles: an application_name is whatever a
// client says it is. A connection of another role that carries the run's
// prefix is not the run's, and is not terminated, though the caller, a
// superuser, could.
func TestTerminateBackendsSparesOtherRoles(t *testing.T) {
	pool := setup(t).pool
	run := "harmless-faults-test-" + unique(t)
	victim := connect(t, run+"-w1")
	other := pgtest.NewRole(t)
	faker := connectAs(t, other, run+"-w2")

	pids, err := faults.TerminateBackends(t.Context(), pool, run)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{int(victim.PgConn().PID())}; !slices.Equal(pids, want) {
		t.Errorf("terminated %v, want %v: only the connection of the caller's role", pids, want)
	}
	wantDead(t, pool, victim, victim.PgConn().PID(), victim.Ping(t.Context()))
	if !alive(t, faker) {
		t.Errorf("the connection of role %s carrying the run's prefix was terminated", other.Name)
	}
}
