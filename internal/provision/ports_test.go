package provision

import (
	"net"
	"strconv"
	"testing"
)

// TestServerPortsAreBelowTheEphemeralRange checks that the ports chosen
// for servers are distinct, free, and outside the range the kernel gives
// clients' connections, where one could take a server's port while the
// server restarts.
func TestServerPortsAreBelowTheEphemeralRange(t *testing.T) {
	lo, hi := portsBelowEphemeral()
	if hi == 0 {
		t.Skip("the ephemeral range cannot be read here, or leaves no room below it: ports come from the kernel")
	}
	ports, err := freePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < lo || p >= hi {
			t.Errorf("port %d outside [%d, %d)", p, lo, hi)
		}
		if seen[p] {
			t.Errorf("port %d chosen twice in %v", p, ports)
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d was chosen as free, but: %v", p, err)
			continue
		}
		l.Close()
	}
}
