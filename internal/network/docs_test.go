package network_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/network"
)

const (
	conceptsPage  = "../../docs/concepts/network-analysis.md"
	checksBlock   = "network-checks"
	cliPage       = "../../docs/reference/cli.md"
	networkChecks = "| `--network-checks` |"
)

// replaceBlock returns page with the lines between the block's
// "<!-- generated:start NAME ..." and "<!-- generated:end NAME -->" lines
// set to content.
func replaceBlock(page []byte, name, content string) ([]byte, error) {
	start := []byte("\n<!-- generated:start " + name + " ")
	end := []byte("\n<!-- generated:end " + name + " -->")
	i := bytes.Index(page, start)
	if i < 0 {
		return nil, fmt.Errorf("no %q marker", start[1:])
	}
	body := i + len(start) + bytes.IndexByte(page[i+len(start):], '\n')
	j := bytes.Index(page[body:], end)
	if j < 0 {
		return nil, fmt.Errorf("no %q marker after the start", end[1:])
	}
	out := append([]byte{}, page[:body+1]...)
	out = append(out, content...)
	return append(out, page[body+j+1:]...), nil
}

// TestChecksDocs: the concepts page's table of checks is the registry's
// (UPDATE_DOCS=1 rewrites it), and every registered check has a section
// there saying why it exists, when it is raised and how to fix it.
func TestChecksDocs(t *testing.T) {
	page, err := os.ReadFile(conceptsPage)
	if err != nil {
		t.Fatal(err)
	}
	want, err := replaceBlock(page, checksBlock, network.ChecksTable())
	if err != nil {
		t.Fatalf("%s: %v", conceptsPage, err)
	}
	if os.Getenv("UPDATE_DOCS") != "" {
		if err := os.WriteFile(conceptsPage, want, 0o644); err != nil {
			t.Fatal(err)
		}
		page = want
	}
	if !bytes.Equal(page, want) {
		t.Errorf("%s: the table of checks is not the registry's: run UPDATE_DOCS=1 go test ./internal/network -run TestChecksDocs", conceptsPage)
	}
	for _, c := range network.Checks() {
		if !bytes.Contains(page, []byte("\n### "+c+"\n")) {
			t.Errorf("%s: no section \"### %s\": say why the check exists, when it is raised and how to fix it", conceptsPage, c)
		}
	}
}

// TestDocsNameRegisteredChecks: the pages that list checks by hand name
// every registered check where they list them, and no check that is not
// registered anywhere.
func TestDocsNameRegisteredChecks(t *testing.T) {
	known := append(network.Checks(), network.CheckInvalid)
	name := regexp.MustCompile(`\bnp\.[a-z0-9]+(?:-[a-z0-9]+)*`)
	for _, page := range []string{conceptsPage, cliPage, "../../docs/reference/metrics.md", "../../docs/cookbook/index.md"} {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range name.FindAllString(string(src), -1) {
			if !slices.Contains(known, n) {
				t.Errorf("%s names %s, which is not a registered check (%s)", filepath.Base(page), n, strings.Join(known, ", "))
			}
		}
	}
	src, err := os.ReadFile(cliPage)
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for l := range strings.Lines(string(src)) {
		if strings.HasPrefix(l, networkChecks) && strings.Contains(l, "np.") {
			row = l
		}
	}
	for _, c := range network.Checks() {
		if !strings.Contains(row, "`"+c+"`") {
			t.Errorf("%s: the %s row of portal run does not name %s", cliPage, networkChecks, c)
		}
	}
}
