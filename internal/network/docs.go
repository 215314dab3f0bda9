package network

import (
	"fmt"
	"strings"
)

// ChecksTable renders the registered checks as the markdown table that
// docs/concepts/network-analysis.md holds between its network-checks
// markers: each check linked to its section of that page, the kind of
// object its findings are on, its severity and summary. A test keeps the
// page equal to it, so a registered check cannot go undocumented.
func ChecksTable() string {
	var b strings.Builder
	b.WriteString("| check | on | severity | what it means |\n|---|---|---|---|\n")
	for _, c := range registry {
		fmt.Fprintf(&b, "| [`%s`](#%s) | %s | %s | %s |\n",
			c.Name, strings.ReplaceAll(c.Name, ".", ""), c.On(), c.Severity, strings.ReplaceAll(c.Summary, "|", `\|`))
	}
	return b.String()
}
