package soak

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/harmless-dev/harmless/adapters"
)

// --nemesis all chooses what the environment allows; naming one it does
// not allow is an error that says why.
func TestParseNemeses(t *testing.T) {
	plain := adapters.Adapter{Name: "plain"}
	full := adapters.Adapter{Name: "full", Declares: adapters.Declaration{RedeliveryWindow: time.Hour, ExternalEffects: adapters.Outbox}}

	all, err := ParseNemeses("all", full, true)
	if err != nil || !slices.Equal(all, Nemeses()) {
		t.Errorf("all, owned server, window and external effects: %v, %v; want every nemesis", all, err)
	}
	some, err := ParseNemeses("", plain, false)
	if err != nil || slices.Contains(some, NemesisCrash) || slices.Contains(some, NemesisPurge) || slices.Contains(some, NemesisDestination) || len(some) != 5 {
		t.Errorf("default on a DSN without window or external effects: %v, %v", some, err)
	}
	if none, err := ParseNemeses("none", full, true); err != nil || len(none) != 0 {
		t.Errorf("none: %v, %v", none, err)
	}
	if two, err := ParseNemeses(" kill, crash,kill", full, true); err != nil || !slices.Equal(two, []string{NemesisKill, NemesisCrash}) {
		t.Errorf("a list with spaces and a repeat: %v, %v", two, err)
	}
	for _, tc := range []struct {
		list    string
		adapter adapters.Adapter
		owned   bool
		want    string
	}{
		{"crash", full, false, "--nemesis crash: the server is named by a DSN"},
		{"kill,purge", plain, true, "--nemesis purge: the implementation declares no redelivery window"},
		{"destination", plain, true, "--nemesis destination: the implementation declares no external effects"},
		{"kil", full, true, "--nemesis kil: no such nemesis (known: kill, cut-before-commit"},
		{"kill,,db-raise", full, true, "--nemesis : no such nemesis"},
	} {
		if _, err := ParseNemeses(tc.list, tc.adapter, tc.owned); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--nemesis %q: %v; want %q", tc.list, err, tc.want)
		}
	}
}
