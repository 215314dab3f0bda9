// Package boundaries_test enforces the module boundaries that
// docs/contributing/module-boundaries.md describes: the contracts import no
// layer, layers do not import each other, and only the composition roots
// (internal/manager, cmd/portal) put layers together.
package boundaries_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/vilaca/portal/"

// layers may not import one another. A layer is a prefix: its subpackages
// belong to it.
var layers = []string{
	"internal/admission",
	"internal/audit",
	"internal/sink",
	"internal/waf",
	"internal/rule",
	"internal/exception",
	"internal/eval",
	"internal/migrate",
	"internal/lookup",
	"internal/network",
	"internal/actions",
	"internal/apigateway",
	"internal/runtime",
}

// foundations is what every package may build on; none of them imports a
// layer. internal/certs is a service two layers share (the webhook's and the
// rule set cache's certificates), so it is one too; so is internal/findings,
// the pipeline every producer of findings publishes into, and
// internal/clustercache, the informer cache every layer reads the cluster
// through; and internal/forward, which carries the verdicts of a replica
// that does not lead to the leader's actions. internal/pki, the certificate library, is used by the data
// planes' tests and tools as well as by internal/certs.
var foundations = []string{
	"internal/certs",
	"internal/pki",
	"internal/clustercache",
	"internal/findings",
	"internal/forward",
	"internal/core",
	"internal/engine",
	"internal/expr",
	"internal/context",
	"internal/image",
	"internal/manifest",
	"internal/reuse",
	"internal/didyoumean",
	"internal/flagalias",
	"internal/junit",
}

// imports lists the module's packages (tests excluded) and the module
// packages each imports.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		pkg := strings.TrimPrefix(fields[0], module)
		graph[pkg] = nil
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module) {
				graph[pkg] = append(graph[pkg], strings.TrimPrefix(imp, module))
			}
		}
	}
	return graph
}

func under(pkg, prefix string) bool { return pkg == prefix || strings.HasPrefix(pkg, prefix+"/") }

func owner(pkg string, groups []string) string {
	for _, g := range groups {
		if under(pkg, g) {
			return g
		}
	}
	return ""
}

func TestLayersDoNotImportEachOther(t *testing.T) {
	graph := imports(t)
	if len(graph) < 10 {
		t.Fatalf("go list found %d packages; the module path or directory is wrong", len(graph))
	}
	for pkg, deps := range graph {
		from := owner(pkg, layers)
		if from == "" {
			continue
		}
		for _, dep := range deps {
			// internal/rule is the rule layer, and it is also the loader the
			// other layers' offline tools use: eval and migrate may read rules,
			// and eval exceptions (portal eval --exceptions).
			if to := owner(dep, layers); to != "" && to != from && !offlineReader(from, to) {
				t.Errorf("%s imports %s: layer %s may not import layer %s; meet through internal/core or wire them in internal/manager", pkg, dep, from, to)
			}
		}
	}
}

// offlineReader reports whether the offline tool from may import the loader
// to.
func offlineReader(from, to string) bool {
	switch to {
	case "internal/rule":
		return from == "internal/migrate" || from == "internal/eval"
	case "internal/exception":
		return from == "internal/eval"
	}
	return false
}

func TestFoundationsImportNoLayer(t *testing.T) {
	for pkg, deps := range imports(t) {
		if owner(pkg, foundations) == "" {
			continue
		}
		for _, dep := range deps {
			if owner(dep, layers) != "" || under(dep, "internal/manager") || under(dep, "api") {
				t.Errorf("%s imports %s: the contracts and the engine may not depend on a layer or on the CRD types", pkg, dep)
			}
		}
	}
}

func TestCoreAndAPIImportNothingOfPortal(t *testing.T) {
	for pkg, deps := range imports(t) {
		if !under(pkg, "internal/core") && !under(pkg, "api") {
			continue
		}
		for _, dep := range deps {
			if !under(dep, "api") || !under(pkg, "api") {
				t.Errorf("%s imports %s: internal/core and api/ are the leaves every other package builds on", pkg, dep)
			}
		}
	}
}

// TestOnlyCompositionRootsImportManager: the manager assembles the layers;
// nothing but the binary, end-to-end tests and the metrics index generator
// (which reads the layer registry's metric sections, as the binary
// registers them) may import it.
func TestOnlyCompositionRootsImportManager(t *testing.T) {
	for pkg, deps := range imports(t) {
		for _, dep := range deps {
			if under(dep, "internal/manager") && !under(pkg, "cmd/portal") && !under(pkg, "test") && !under(pkg, "internal/manager") && !under(pkg, "hack/metricsdocs") {
				t.Errorf("%s imports %s: only cmd/portal (and end-to-end tests) assemble the manager", pkg, dep)
			}
		}
	}
}
