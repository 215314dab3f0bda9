// Package freeport picks TCP ports for servers whose address has to be
// known before they listen: a webhook kubeconfig written before the API
// server that reads it starts, a child process told its port by flag.
//
// Listening on port 0 and closing the listener hands back a port from the
// kernel's ephemeral range, the range every outgoing connection and every
// other bind to port 0 also draws from; on a busy machine (a test run with
// API servers, etcd and their clients) one of those takes it before the
// server binds it, and the server fails with "address already in use".
// Pick draws from below that range instead (and below the NodePort
// range), where only an explicit bind lands.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// The kernel's default ephemeral range (Linux), used where it cannot be read.
const (
	defaultEphemeralLow  = 32768
	defaultEphemeralHigh = 60999
	// Pick draws from lowest to highest: above the ports Kubernetes' own
	// components listen on (6443, 10250-10259 and their like) and below
	// the NodePort range (30000-32767), which kube-proxy may redirect on a
	// node's addresses.
	lowest  = 20000
	highest = 29999
	// room is the fewest ports a range to draw from must have.
	room  = 1000
	tries = 64
)

// rangeFile is where Linux states its ephemeral range.
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// Pick returns a port on host that nothing listens on at the time of the
// call, outside the kernel's ephemeral range when there is room for one.
// Two callers may still draw the same port; the draw is uniform over some
// ten thousand ports, so that takes two picks left unbound at once.
func Pick(host string) (int, error) {
	low, high := span(ephemeral())
	return pickIn(host, low, high)
}

func pickIn(host string, low, high int) (int, error) {
	l, port, err := listenIn(host, low, high)
	if err != nil {
		return 0, err
	}
	_ = l.Close()
	return port, nil
}

// listenIn listens on a port of low to high drawn at random.
func listenIn(host string, low, high int) (net.Listener, int, error) {
	var last error
	for range tries {
		port := low + rand.IntN(high-low+1)
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			last = err
			continue
		}
		return l, port, nil
	}
	return nil, 0, fmt.Errorf("no free port on %s in %d-%d after %d tries: %w", host, low, high, tries, last)
}

// PickN returns n different ports on host, as Pick chooses them: each is
// held until all are chosen, so no two are the same.
func PickN(host string, n int) ([]int, error) {
	low, high := span(ephemeral())
	ports := make([]int, 0, n)
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for len(ports) < n {
		l, port, err := listenIn(host, low, high)
		if err != nil {
			return nil, err
		}
		held = append(held, l)
		ports = append(ports, port)
	}
	return ports, nil
}

// Addr is Pick's port joined to host.
func Addr(host string) (string, error) {
	port, err := Pick(host)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// span is the range Pick draws from: lowest to highest, short of the
// ephemeral range (low to high); above it where that leaves too few.
func span(low, high int) (int, int) {
	if top := min(highest, low-1); top-lowest+1 >= room {
		return lowest, top
	}
	if 65535-high >= room {
		return high + 1, 65535
	}
	return lowest, highest
}

// ephemeral reads the kernel's ephemeral port range.
func ephemeral() (int, int) {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return defaultEphemeralLow, defaultEphemeralHigh
	}
	return parseRange(string(b))
}

func parseRange(s string) (int, int) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return defaultEphemeralLow, defaultEphemeralHigh
	}
	low, err1 := strconv.Atoi(f[0])
	high, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || low < 1 || high > 65535 || low > high {
		return defaultEphemeralLow, defaultEphemeralHigh
	}
	return low, high
}
