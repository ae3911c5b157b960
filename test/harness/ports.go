package harness

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
)

// FreePorts returns n distinct loopback ports that were free a moment ago.
// All n are held open until the last is picked, so none repeats; another
// process may still take one before the caller binds it.
//
// The ports are drawn at random below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), where no outgoing connection gets its
// source port and no listener on port 0 is placed. Asking for port 0 would
// pick from that range, and a port picked there and closed again could be
// handed to any process's next connection before the caller binds it: with
// suites running side by side, each with its API server clients, that is
// not rare enough. Below the range only another caller drawing the same
// port in the same moment can take it.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	low := ephemeralLow()
	for range n {
		l, err := listenBelow(low)
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// drawFloor is the lowest port drawn: above the well-known and the
// commonly registered low ports.
const drawFloor = 10000

// listenBelow listens on a random loopback port in [drawFloor, low); if
// that range is too small or every draw is taken, on port 0.
func listenBelow(low int) (net.Listener, error) {
	if low-drawFloor >= 1000 {
		for range 50 {
			port := drawFloor + rand.IntN(low-drawFloor)
			if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
				return l, nil
			}
		}
	}
	return net.Listen("tcp", "127.0.0.1:0")
}

// ephemeralLow is the first port of the kernel's ephemeral range, or 0 if it
// cannot be read (then ports are picked as port 0 picks them).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil {
		return 0
	}
	return low
}
