package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
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

// The modules no Portal process links: each brought package initialisers
// that every start paid, whichever command ran (docs/performance.md, "The
// metrics filter without the API server's libraries"). k8s.io/apiserver came
// in through controller-runtime's metrics filter and brought the rest.
var keptOut = []string{
	"k8s.io/apiserver",
	"google.golang.org/grpc",
	"go.opentelemetry.io/otel",
	"github.com/google/cel-go",
}

// This test binary links what the portal binary does, so its build
// information lists the modules the binary holds.
func TestHeavyModulesStayOut(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build information in the test binary")
	}
	if len(bi.Deps) < 20 {
		t.Fatalf("build information lists %d modules, want all the binary links", len(bi.Deps))
	}
	for _, m := range bi.Deps {
		if slices.Contains(keptOut, m.Path) {
			t.Errorf("%s is linked into portal: find the import that brings it (go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/portal) and keep it out, or measure the start-up it costs first", m.Path)
		}
	}
}
