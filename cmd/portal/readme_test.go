package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/vilaca/portal/internal/manager"
)

// TestReadmeLayerTableIsCurrent: the README's layer table says which layers
// exist. A row that says "coming" names the flag that will switch it on, and
// fails here once `portal run` has that flag; every layer `portal run` can
// switch on has a row that says it exists and names its flag. The table went
// stale once already (lookups and actions said "coming" long after they
// worked).
func TestReadmeLayerTableIsCurrent(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := layerTableRows(t, string(data))
	runFlags := map[string]bool{}
	for _, c := range newRootCommand().Commands() {
		if c.Name() == "run" {
			c.Flags().VisitAll(func(f *pflag.Flag) { runFlags[f.Name] = true })
		}
	}
	if len(runFlags) == 0 {
		t.Fatal("no run command")
	}
	flag := regexp.MustCompile("`(?:portal run )?--([a-z-]+)`")
	exists := map[string]bool{}
	for _, r := range rows {
		named := flag.FindAllStringSubmatch(r.status, -1)
		switch {
		case strings.HasPrefix(r.status, "**exists**"):
			for _, m := range named {
				exists[m[1]] = true
			}
		case strings.HasPrefix(r.status, "coming"):
			if len(named) == 0 {
				t.Errorf("README row %q says coming without naming the flag that will switch it on, as coming (`--flag`)", r.layer)
			}
			for _, m := range named {
				if runFlags[m[1]] {
					t.Errorf("README row %q says coming, but portal run has --%s: say **exists** and what it does", r.layer, m[1])
				}
			}
		default:
			t.Errorf("README row %q: status %q is neither **exists** nor coming", r.layer, r.status)
		}
	}
	for _, l := range manager.Layers() {
		if !runFlags[l.Name()] {
			t.Errorf("layer %s has no flag --%s on portal run", l.Name(), l.Name())
		}
		if !exists[l.Name()] {
			t.Errorf("no README row says the %s layer exists and names `portal run --%s`", l.Name(), l.Name())
		}
	}
}

type layerRow struct{ layer, status string }

// layerTableRows reads the table under the header "| layer | what it does |
// status |".
func layerTableRows(t *testing.T, readme string) []layerRow {
	t.Helper()
	_, table, ok := strings.Cut(readme, "| layer | what it does | status |\n")
	if !ok {
		t.Fatal("README has no layer table")
	}
	var rows []layerRow
	for i, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if i == 0 {
			continue // the separator row
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 3 {
			t.Fatalf("README layer table row %q has %d cells", line, len(cells))
		}
		rows = append(rows, layerRow{layer: strings.TrimSpace(cells[0]), status: strings.TrimSpace(cells[2])})
	}
	if len(rows) == 0 {
		t.Fatal("README layer table is empty")
	}
	return rows
}
