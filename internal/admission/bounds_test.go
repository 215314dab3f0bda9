package admission_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

// TestCostlyBuiltinsStopWithinTheBudget writes a ConfigMap of 900 KB under
// two rules whose cost hides in what used to be metered as constant: len of
// a long string in a 40,000-iteration loop, and a regular expression built at
// run time with a program of 30,000 instructions. Each must end in its budget
// error and the write be denied by Portal's answer; unmetered, the first ran
// past the API server's timeout (a webhook failure, and both cores busy for
// seconds after it) and the second cost seconds of CPU.
func TestCostlyBuiltinsStopWithinTheBudget(t *testing.T) {
	cluster(t)
	const ns = "bounds-cost"
	namespace(t, ns, nil)
	rules := map[string]string{
		"bounds-len":     `all(1..40000, {len(object.data.big ?? "") >= 0})`,
		"bounds-pattern": `let p = ".{1000}"; let q = p + p + p + p + p; (object.data.big ?? "") matches (q + q + q + q + q + q)`,
	}
	for name, expr := range rules {
		putRule(t, name, simpleRule(name, ns, configMapGVK, expr, "never", "deny"), "configmaps")
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: ns},
		Data:       map[string]string{"big": strings.Repeat("a", 900_000)},
	}
	var err error
	eventually(t, "the API server sends the namespace's ConfigMaps to Portal", func() bool {
		err = env.client.Create(context.Background(), cm, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "[bounds-")
	})
	mustContain(t, "the denial", err.Error(),
		"[bounds-len] evaluation error: evaluation budget exceeded: the rule ran more than",
		"[bounds-pattern] evaluation error: evaluation budget exceeded: a pattern the rule built is too large")
}

// TestResultsAreBoundedPerRuleAndObject: a pod of 60 containers that all fail
// a container-scoped rule is denied with ten of them, a note saying how many
// were not evaluated, one action verdict (not sixty), and a denial within
// MaxDenialBytes however many rules fail.
func TestResultsAreBoundedPerRuleAndObject(t *testing.T) {
	eng := engine.New(exprlang.New())
	label := core.ActionSpec{Type: "label", Params: map[string]string{"key": "portal.io/flag", "value": "x"}}
	var compiled []*engine.Rule
	for i := range 20 {
		r, err := eng.Compile(&core.Rule{
			Name: fmt.Sprintf("named-%02d", i), Enabled: true, Modes: []core.Mode{core.ModeAdmission},
			EnforcementAction: core.ActionDeny, OnError: core.OnErrorDeny, Actions: []core.ActionSpec{label},
			Match:      core.Match{GVKs: []core.GVK{{Version: "v1", Kind: "Pod"}}},
			Expression: `container.name != ""`,
			Message:    strings.Repeat("m", 300) + " {{ container.name }}",
		})
		if err != nil {
			t.Fatal(err)
		}
		compiled = append(compiled, r)
	}
	eng.SetRules(compiled)
	rec := &verdictRecorder{}
	wh, err := admission.New(admission.Options{
		Evaluator: eng, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler), Verdicts: rec,
	})
	if err != nil {
		t.Fatal(err)
	}
	var containers []string
	for i := range 60 {
		containers = append(containers, fmt.Sprintf(`{"name":"c%d","image":"nginx:1"}`, i))
	}
	obj := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default","uid":"u"},"spec":{"containers":[` + strings.Join(containers, ",") + `]}}`
	resp := post(t, wh, reviewFor("many", "CREATE", "", "v1", "Pod", "default", obj, "null"))
	if resp.Allowed || resp.Result == nil {
		t.Fatalf("admitted: %+v", resp)
	}
	msg := resp.Result.Message
	if len(msg) > admission.MaxDenialBytes+200 {
		t.Errorf("denial of %d bytes, want at most about %d", len(msg), admission.MaxDenialBytes)
	}
	mustContain(t, "the denial", msg, "[named-00] ", "(container: c9)", "50 more containers not evaluated: at most 10 results per rule and object", "more denials (at most")
	if strings.Contains(msg, "(container: c10)") {
		t.Errorf("the denial names an eleventh container of one rule")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.vs) != len(compiled) {
		t.Errorf("%d verdicts handed to the actions, want one per rule (%d)", len(rec.vs), len(compiled))
	}
}
