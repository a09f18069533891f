package soak

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
)

// The databases the command can plan: a server named by a DSN, one server
// harmless starts (a cluster or a container), and a replicated formation.
var (
	onADSN      = Database{}
	onOneServer = Database{Owned: true}
	onFormation = Database{Owned: true, Formation: true}
)

// --nemesis all chooses what the environment allows; naming one it does
// not allow is an error that says why.
func TestParseNemeses(t *testing.T) {
	plain := adapters.Adapter{Name: "plain"}
	full := adapters.Adapter{Name: "full", Declares: adapters.Declaration{RedeliveryWindow: time.Hour, ExternalEffects: adapters.Outbox}}

	all, err := ParseNemeses("all", full, onOneServer)
	if want := slices.DeleteFunc(Nemeses(), func(n string) bool { return n == NemesisFailover }); err != nil || !slices.Equal(all, want) {
		t.Errorf("all, one owned server, window and external effects: %v, %v; want every nemesis but failover", all, err)
	}
	some, err := ParseNemeses("", plain, onADSN)
	if err != nil || slices.Contains(some, NemesisCrash) || slices.Contains(some, NemesisFailover) || slices.Contains(some, NemesisPurge) ||
		slices.Contains(some, NemesisDestination) || len(some) != 5 {
		t.Errorf("default on a DSN without window or external effects: %v, %v", some, err)
	}
	if none, err := ParseNemeses("none", full, onOneServer); err != nil || len(none) != 0 {
		t.Errorf("none: %v, %v", none, err)
	}
	if two, err := ParseNemeses(" kill, crash,kill", full, onOneServer); err != nil || !slices.Equal(two, []string{NemesisKill, NemesisCrash}) {
		t.Errorf("a list with spaces and a repeat: %v, %v", two, err)
	}
	for _, tc := range []struct {
		list    string
		adapter adapters.Adapter
		db      Database
		want    string
	}{
		{"crash", full, onADSN, "--nemesis crash: the server is named by a DSN"},
		{"kill,purge", plain, onOneServer, "--nemesis purge: the implementation declares no redelivery window"},
		{"destination", plain, onOneServer, "--nemesis destination: the implementation declares no external effects"},
		{"kil", full, onOneServer, "--nemesis kil: no such nemesis (known: kill, cut-before-commit"},
		{"kill,,db-raise", full, onOneServer, "--nemesis : no such nemesis"},
	} {
		if _, err := ParseNemeses(tc.list, tc.adapter, tc.db); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--nemesis %q: %v; want %q", tc.list, err, tc.want)
		}
	}
}

// A failover needs a replicated formation, and there a crash is a
// failover: each is available where the other is not, and says why.
func TestFailoverNemesisOnlyOnAFormation(t *testing.T) {
	full := adapters.Adapter{Name: "full", Declares: adapters.Declaration{RedeliveryWindow: time.Hour, ExternalEffects: adapters.Outbox}}
	const (
		oneServer = "the database is one server: a failover needs a replicated formation (use --provision ha)"
		formation = "on a replicated formation a crash of the primary is a failover: use the failover nemesis"
	)
	for _, tc := range []struct {
		name              string
		db                Database
		crashWhy, failWhy string
	}{
		{"a DSN", onADSN, "the server is named by a DSN", oneServer},
		{"one server", onOneServer, "", oneServer},
		{"a formation", onFormation, formation, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for n, want := range map[string]string{NemesisCrash: tc.crashWhy, NemesisFailover: tc.failWhy} {
				got := Unavailable(n, full, tc.db)
				if (want == "") != (got == "") || !strings.Contains(got, want) {
					t.Errorf("Unavailable(%s): %q, want %q", n, got, want)
				}
				_, err := ParseNemeses(n, full, tc.db)
				switch {
				case want == "" && err != nil:
					t.Errorf("--nemesis %s: %v", n, err)
				case want != "" && (err == nil || !strings.Contains(err.Error(), "--nemesis "+n+": "+want)):
					t.Errorf("--nemesis %s: %v; want %q", n, err, want)
				}
			}
		})
	}
	// On a formation, all is every nemesis but crash, failover included,
	// in the documentation's order.
	all, err := ParseNemeses("all", full, onFormation)
	if want := slices.DeleteFunc(Nemeses(), func(n string) bool { return n == NemesisCrash }); err != nil || !slices.Equal(all, want) {
		t.Errorf("all on a formation: %v, %v; want %v", all, err, want)
	}
}
