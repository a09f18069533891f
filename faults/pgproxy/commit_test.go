package pgproxy

import "testing"

func TestIsCommit(t *testing.T) {
	for text, want := range map[string]bool{
		"commit":                          true,
		"COMMIT":                          true,
		"  Commit ;\n":                    true,
		"end":                             true,
		"END TRANSACTION;":                true,
		"commit work":                     true,
		"commit and chain":                true,
		"COMMIT TRANSACTION AND NO CHAIN": true,
		"commit and":                      false,
		"commit prepared 'x'":             false,
		"committed":                       false,
		"commit; commit":                  false,
		"rollback":                        false,
		"begin":                           false,
		"select 'commit'":                 false,
		"":                                false,
		"end loop":                        false,
	} {
		if got := isCommit([]byte(text)); got != want {
			t.Errorf("isCommit(%q) = %v, want %v", text, got, want)
		}
	}
}
