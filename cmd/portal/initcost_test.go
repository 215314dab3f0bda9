package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// maxInitBytes bounds what one of Portal's packages may allocate before
// main: every invocation pays its initialisers (portal eval in a CI step,
// each replica's start), whichever command runs. Work a command needs
// belongs in the command, or behind a sync.Once.
const maxInitBytes = 64 << 10

// Every package of Portal linked into the binary initialises cheaply. This
// test binary links what the portal binary does; run again with
// GODEBUG=inittrace=1, the runtime reports each package's initialiser
// (allocation counts, not times, so the bound is exact). A pattern with a
// counted repetition ([a-z]{1,253} compiles to 253 copies of the class, 289
// KB) failed it.
func TestPortalPackagesInitCheaply(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	const module = "github.com/vilaca/portal/"
	seen := 0
	// init github.com/vilaca/portal/internal/rule @12 ms, 0.05 ms clock, 15648 bytes, 163 allocs
	for sc := bufio.NewScanner(&stderr); sc.Scan(); {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[0] != "init" || !strings.HasPrefix(f[1], module) {
			continue
		}
		seen++
		n, err := strconv.Atoi(f[7])
		if err != nil || f[8] != "bytes," {
			t.Fatalf("cannot read %q", sc.Text())
		}
		if n > maxInitBytes {
			t.Errorf("%s allocates %d bytes before main, more than %d: move the work into the command that needs it", f[1], n, maxInitBytes)
		}
	}
	if seen < 20 {
		t.Fatalf("the init trace named %d of Portal's packages, want all of them:\n%s", seen, stderr.String())
	}
}
