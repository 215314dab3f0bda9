// Command costdocs writes the cost table of docs/concepts/evaluation-budget.md
// from the evaluation budget's cost model (internal/expr/exprlang/costs.go):
// what every builtin, operator, function and node kind an expression can run
// is charged. `make docs-generate` writes it, `make docs` (-check) fails when
// it is stale.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vilaca/portal/hack/internal/markers"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

const page = "docs/concepts/evaluation-budget.md"

func main() {
	root := flag.String("root", ".", "the repository root")
	check := flag.Bool("check", false, "do not write: fail when the page differs from what would be written")
	flag.Parse()
	block := markers.Block{Name: "cost-table", Content: table(exprlang.CostModel())}
	if err := markers.Update(filepath.Join(*root, page), []markers.Block{block}, *check, "make docs-generate"); err != nil {
		fmt.Fprintln(os.Stderr, "costdocs:", err)
		os.Exit(1)
	}
}

// table renders the rows, one table per section.
func table(rows []exprlang.CostRow) []byte {
	var b bytes.Buffer
	section := ""
	for _, r := range rows {
		if r.Section != section {
			if section != "" {
				b.WriteString("\n")
			}
			section = r.Section
			fmt.Fprintf(&b, "| %s | charged |\n|---|---|\n", section)
		}
		name := r.Name
		if !strings.Contains(name, "`") {
			name = "`" + name + "`"
		}
		fmt.Fprintf(&b, "| %s | %s |\n", strings.ReplaceAll(name, "|", `\|`), strings.ReplaceAll(r.Charge, "|", `\|`))
	}
	return b.Bytes()
}
