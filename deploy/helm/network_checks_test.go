package helm_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vilaca/portal/internal/network"
)

// TestChartKnowsEveryNetworkCheck: the values schema's enum of
// network.checks is the NetworkPolicy check registry: a check registered
// without its schema entry (the chart would refuse to enable it), or an
// entry for a check that no longer exists (the pod would refuse to start),
// fails here.
func TestChartKnowsEveryNetworkCheck(t *testing.T) {
	var schema struct {
		Properties struct {
			Network struct {
				Properties struct {
					Checks struct {
						Items struct {
							Enum []string `json:"enum"`
						} `json:"items"`
					} `json:"checks"`
				} `json:"properties"`
			} `json:"network"`
		} `json:"properties"`
	}
	readValuesSchema(t, &schema)
	got := schema.Properties.Network.Properties.Checks.Items.Enum
	if want := network.Checks(); !slices.Equal(got, want) {
		t.Errorf("values.schema.json: properties.network.properties.checks.items.enum is %q; the registry's checks are %q (sorted)", got, want)
	}
}

// readValuesSchema decodes the chart's values.schema.json into v.
func readValuesSchema(t *testing.T, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("portal", "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatal(err)
	}
}
