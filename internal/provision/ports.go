package provision

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
)

// freePort returns a free port on 127.0.0.1, as freePorts does.
func freePort() (int, error) {
	ports, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// freePorts returns n distinct free ports on 127.0.0.1, holding each open
// until all are chosen. They are taken below the kernel's ephemeral range
// when it leaves room there: a server is started on its port some time
// after it was chosen, and started again on it after a crash or a
// failover, and a port in the ephemeral range can meanwhile become the
// local end of any client's connection, which fails the server's bind.
func freePorts(n int) ([]int, error) {
	var ports []int
	lo, hi := portsBelowEphemeral()
	for range n {
		l, err := listenFree(lo, hi)
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Servers' ports are drawn from [minServerPort, the ephemeral range's
// start), when that leaves at least minServerPorts ports.
const (
	minServerPort  = 20000
	minServerPorts = 1000
)

// portsBelowEphemeral returns the range [lo, hi) of ports to draw servers'
// ports from; 0, 0 when the kernel's ephemeral range (Linux's
// ip_local_port_range) cannot be read or leaves too little room below it.
func portsBelowEphemeral() (lo, hi int) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	var first, last int
	if _, err := fmt.Sscan(string(data), &first, &last); err != nil || first-minServerPort < minServerPorts {
		return 0, 0
	}
	return minServerPort, first
}

// listenFree listens on a free port of 127.0.0.1 drawn at random from
// [lo, hi), or on any the kernel gives when the range is empty or has no
// free port after a few draws.
func listenFree(lo, hi int) (net.Listener, error) {
	for range 20 {
		if hi <= lo {
			break
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(lo+rand.IntN(hi-lo))))
		if err == nil {
			return l, nil
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}
