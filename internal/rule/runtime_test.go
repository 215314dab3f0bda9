package rule_test

import (
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

// TestRuntimeBlock: mode runtime needs runtime.events naming known classes
// once each; the block is refused without the mode; runtime is never a
// default mode; and a rule reading event compiles only as mode [runtime].
func TestRuntimeBlock(t *testing.T) {
	const head = "name: r\nmatch: {gvk: [{kind: Pod}]}\n"
	for _, c := range []struct {
		doc, err string
	}{
		{"mode: [runtime]\nruntime: {events: [exec, port-forward]}\nrule: event.verb == 'create'\n", ""},
		{"mode: [runtime]\nrule: 'true'\n", "runtime.events is required with mode runtime"},
		{"mode: [audit]\nruntime: {events: [exec]}\nrule: 'true'\n", "runtime is only read by rules of mode runtime"},
		{"mode: [runtime]\nruntime: {events: [exce]}\nrule: 'true'\n", `did you mean "exec"`},
		{"mode: [runtime]\nruntime: {events: [exec, exec]}\nrule: 'true'\n", "listed twice"},
		{"mode: [runtime]\nruntime: {events: []}\nrule: 'true'\n", "runtime.events is empty"},
		{"rule: event.verb == 'get'\n", "set mode to [runtime]"},
		{"mode: [runtime, audit]\nruntime: {events: [any]}\nrule: event.verb == 'get'\n", "set mode to [runtime]"},
		{"mode: [runtime]\nruntime: {events: [any]}\nrule: event.usr.username == 'x'\n", "unknown field event.usr"},
	} {
		eng := engine.New(exprlang.New())
		rules, errs := rule.ParseFile("r.yaml", []byte(head+c.doc))
		var err error
		if len(errs) > 0 {
			err = errs[0]
		} else if _, cerr := eng.Compile(rules[0]); cerr != nil {
			err = cerr
		}
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.doc, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %v, want an error saying %q", c.doc, err, c.err)
		}
	}
	rules, errs := rule.ParseFile("r.yaml", []byte(head+"rule: 'true'\n"))
	if len(errs) > 0 || rules[0].HasMode("runtime") {
		t.Errorf("a rule without mode runs in %v (%v), want admission and audit only", rules[0].Modes, errs)
	}
}
