package network_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/network"
)

// TestRegisterRefusesMalformedChecks: a check whose name could not travel
// as a flag value, metric label and Helm enum, a taken name, an unknown
// severity, or a check with no function or two, is refused at start-up
// and leaves the registry as it was.
func TestRegisterRefusesMalformedChecks(t *testing.T) {
	policy := func(*network.Namespace, *network.Policy, *network.Messages) {}
	namespace := func(*network.Namespace, *network.Messages) {}
	ok := network.Check{Name: "np.fine", Severity: core.SeverityLow, Summary: "s", Policy: policy}
	for name, change := range map[string]func(*network.Check){
		"no np. prefix":  func(c *network.Check) { c.Name = "fine" },
		"upper case":     func(c *network.Check) { c.Name = "np.Fine" },
		"a comma":        func(c *network.Check) { c.Name = "np.a,np.b" },
		"too long":       func(c *network.Check) { c.Name = "np." + strings.Repeat("a", 61) },
		"taken":          func(c *network.Check) { c.Name = network.CheckBroadCIDR },
		"invalid-policy": func(c *network.Check) { c.Name = network.CheckInvalid },
		"severity":       func(c *network.Check) { c.Severity = "urgent" },
		"no function":    func(c *network.Check) { c.Policy = nil },
		"two functions":  func(c *network.Check) { c.Namespace = namespace },
		"no summary":     func(c *network.Check) { c.Summary = "" },
	} {
		before := network.Checks()
		c := ok
		change(&c)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Register(%+v) did not panic", name, c)
				}
			}()
			network.Register(c)
		}()
		if after := network.Checks(); !slices.Equal(before, after) {
			t.Errorf("%s: the registry changed from %v to %v", name, before, after)
		}
	}
}
