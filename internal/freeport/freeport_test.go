package freeport

import (
	"net"
	"strconv"
	"testing"
)

// The ports Pick hands out lie outside the range outgoing connections and
// binds to port 0 draw from, and a server can listen on them.
func TestPickIsOutsideTheEphemeralRange(t *testing.T) {
	low, high := ephemeral()
	from, to := span(low, high)
	// Where the ephemeral range leaves no room, Pick draws from inside it.
	outside := to < low || from > high
	for range 50 {
		port, err := Pick("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if outside && port >= low && port <= high {
			t.Fatalf("port %d is in the ephemeral range %d-%d", port, low, high)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("listening on the picked port: %v", err)
		}
		_ = l.Close()
	}
}

// A port something listens on is not picked.
func TestPickSkipsWhatIsTaken(t *testing.T) {
	low, high := span(ephemeral())
	// Hold every port of a small window, and draw only from it: Pick must
	// say it found none rather than return a held one.
	var held []net.Listener
	t.Cleanup(func() {
		for _, l := range held {
			_ = l.Close()
		}
	})
	taken := 0
	for p := low; p < low+8 && p <= high; p++ {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			taken++ // held by someone else already: as good
			continue
		}
		held = append(held, l)
	}
	for range 20 {
		port, err := pickIn("127.0.0.1", low, low+7)
		if err == nil {
			t.Fatalf("picked port %d, held (%d held by this test, %d by others)", port, len(held), taken)
		}
	}
}

// PickN's ports are all different.
func TestPickNIsDistinct(t *testing.T) {
	for range 20 {
		ports, err := PickN("127.0.0.1", 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(ports) != 3 || ports[0] == ports[1] || ports[0] == ports[2] || ports[1] == ports[2] {
			t.Fatalf("PickN(3) = %v, want three different ports", ports)
		}
	}
}

func TestSpan(t *testing.T) {
	for _, c := range []struct{ low, high, wantLow, wantHigh int }{
		{32768, 60999, 20000, 29999}, // Linux's default
		{25000, 60999, 20000, 24999}, // short of a range that starts lower
		{20500, 60999, 61000, 65535}, // no room below: above
		{1024, 65000, 20000, 29999},  // no room either side: the usual span
	} {
		if l, h := span(c.low, c.high); l != c.wantLow || h != c.wantHigh {
			t.Errorf("span(%d, %d) = %d-%d, want %d-%d", c.low, c.high, l, h, c.wantLow, c.wantHigh)
		}
	}
}

func TestParseRange(t *testing.T) {
	for in, want := range map[string][2]int{
		"32768\t60999\n": {32768, 60999},
		"1024 65535":     {1024, 65535},
		"":               {defaultEphemeralLow, defaultEphemeralHigh},
		"9 x":            {defaultEphemeralLow, defaultEphemeralHigh},
		"60000 1000":     {defaultEphemeralLow, defaultEphemeralHigh},
		"0 70000":        {defaultEphemeralLow, defaultEphemeralHigh},
	} {
		if l, h := parseRange(in); l != want[0] || h != want[1] {
			t.Errorf("parseRange(%q) = %d-%d, want %d-%d", in, l, h, want[0], want[1])
		}
	}
}
