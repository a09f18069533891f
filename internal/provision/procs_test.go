package provision

import "testing"

func TestNamesPath(t *testing.T) {
	dir := "/tmp/harmless-ha-1-2"
	for _, tc := range []struct {
		cmdline string
		want    bool
	}{
		{"/usr/lib/postgresql/15/bin/postgres\x00-D\x00/tmp/harmless-ha-1-2/node1\x00-p\x005432\x00", true},
		{"pg_autoctl\x00run\x00--pgdata\x00/tmp/harmless-ha-1-2/monitor", true},
		{"ls\x00/tmp/harmless-ha-1-2", true},
		{"pg_autoctl\x00--pgdata=/tmp/harmless-ha-1-2/node2\x00", true},
		{"/usr/lib/postgresql/15/bin/postgres\x00-D\x00/tmp/harmless-ha-1-23/node1\x00", false},
		{"pg_autoctl: start/stop postgres\x00", false},
		{"", false},
	} {
		if got := namesPath([]byte(tc.cmdline), dir); got != tc.want {
			t.Errorf("namesPath(%q) = %v, want %v", tc.cmdline, got, tc.want)
		}
	}
}
