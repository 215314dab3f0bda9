package rule_test

import (
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

const mixedFile = `# plain rule with defaults
name: plain
match:
  gvk: [{group: "", kind: Pod}]
rule: container.securityContext.privileged == true
---
apiVersion: portal.io/v1alpha1
kind: PortalClusterRule
metadata:
  name: from-manifest
spec:
  severity: low
  category: Pod Security Standards (Baseline)
  mode: [audit]
  enforcementAction: warn
  alert: insecure
  match:
    gvk: [{group: apps, version: v1, kind: Deployment}]
  rule: spec.hostNetwork == true
---
apiVersion: portal.io/v1alpha1
kind: PortalRule
metadata: {name: team, namespace: team-a}
spec:
  match:
    gvk: [{kind: Pod}]
  rule: "true"
`

func TestParseFileDefaultsAndForms(t *testing.T) {
	rules, errs := rule.ParseFile("rules.yaml", []byte(mixedFile))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if len(rules) != 3 {
		t.Fatalf("got %d rules", len(rules))
	}
	plain, manifest, team := rules[0], rules[1], rules[2]
	if !plain.Enabled || plain.Severity != core.SeverityMedium || plain.EnforcementAction != core.ActionDeny ||
		plain.OnError != core.OnErrorDeny || len(plain.Modes) != 2 || plain.Source.Line != 2 {
		t.Errorf("plain rule defaults: %+v", plain)
	}
	if manifest.Name != "from-manifest" || manifest.Category != "Pod Security Standards (Baseline)" || plain.Category != "" || manifest.OnError != core.OnErrorAllow || manifest.Source.Line != 7 ||
		len(manifest.Actions) != 1 || manifest.Actions[0].Type != "alertmanager" || manifest.Actions[0].Params["template"] != "insecure" {
		t.Errorf("manifest rule: %+v", manifest)
	}
	if team.Namespace != "team-a" {
		t.Errorf("PortalRule namespace = %q", team.Namespace)
	}
}

func TestParseErrorsPointAtFileAndLine(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"unknown field", "name: a\nmatch: {gvk: [{kind: Pod}]}\nrule: 'true'\nsevrity: high\n", `r.yaml:4:1: unknown field "sevrity": did you mean "severity"?`},
		{"bad enum", "name: a\nseverity: extreme\nmatch: {gvk: [{kind: Pod}]}\nrule: 'true'\n", `r.yaml:2:11: rule "a": severity "extreme"`},
		{"category too long", "name: a\ncategory: " + strings.Repeat("x", 65) + "\nmatch: {gvk: [{kind: Pod}]}\nrule: 'true'\n", `r.yaml:2:11: rule "a": category "xxx`},
		{"category not a word", "name: a\ncategory: \"-- {{ x }}\"\nmatch: {gvk: [{kind: Pod}]}\nrule: 'true'\n", `r.yaml:2:11: rule "a": category "-- {{ x }}" is not`},
		{"misspelt mode", "name: a\nmode: [admision]\nmatch: {gvk: [{kind: Pod}]}\nrule: 'true'\n", `r.yaml:2:8: rule "a": mode: "admision" is not one of [admission audit runtime]: did you mean "admission"?`},
		{"misspelt action", "name: a\nmatch: {gvk: [{kind: Pod}]}\nrule: 'true'\nactions: [{type: lable, key: a}]\n", `rule "a": actions[0].type "lable" is not one of [alertmanager annotate evict label patch-networkpolicy revoke-sa-token]: did you mean "label"?`},
		{"misspelt enforcementAction", "name: a\nenforcementAction: warning\nmatch: {gvk: [{kind: Pod}]}\nrule: 'true'\n", `enforcementAction "warning" is not one of [deny warn dryrun]: did you mean "warn"?`},
		{"kind in the wrong built-in group", "name: a\nmatch: {gvk: [{group: \"\", kind: Deployment}]}\nrule: 'true'\n", `r.yaml:2:15: rule "a": match.gvk[0]: kind Deployment is not in group "" but in "apps" or "extensions", so the rule would match nothing: write {group: apps, kind: Deployment}`},
		{"moved kind suggests its current group", "name: a\nmatch: {gvk: [{group: apps, kind: Ingress}]}\nrule: 'true'\n", `write {group: networking.k8s.io, kind: Ingress}`},
		{"no gvk", "name: a\nrule: 'true'\n", "match.gvk is required"},
		{"no name", "match: {gvk: [{kind: Pod}]}\nrule: 'true'\n", "name is required"},
		{"yaml syntax", "name: a\nrule: [unclosed\n", "r.yaml:"},
		{"other kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", "v1 Pod is not a rule"},
		{"portalrule without namespace", "apiVersion: portal.io/v1alpha1\nkind: PortalRule\nmetadata: {name: x}\nspec: {match: {gvk: [{kind: Pod}]}, rule: 'true'}\n", "no metadata.namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := rule.ParseFile("r.yaml", []byte(tt.doc))
			if len(errs) != 1 || !strings.Contains(errs[0].Error(), tt.want) {
				t.Fatalf("errors %v, want one containing %q", errs, tt.want)
			}
		})
	}
}

func TestCompileFileKeepsGoodRulesAndLocatesBadOnes(t *testing.T) {
	data := mixedFile + "---\nname: broken\nmatch: {gvk: [{kind: Pod}]}\nrule: 'object.x =='\n"
	rules, errs := rule.CompileFile(engine.New(exprlang.New()), "r.yaml", []byte(data))
	if len(rules) != 3 || len(errs) != 1 {
		t.Fatalf("got %d rules, errors %v", len(rules), errs)
	}
	if !strings.HasPrefix(errs[0].Error(), "r.yaml:31:18: rule \"broken\": compile expression") {
		t.Fatalf("error %q does not locate the rule", errs[0])
	}
}

// TestLoadErrorsPointAtFieldAndCharacter: every load error names the file,
// line and column of the field or expression character it is about, in the
// flow style the docs use too, and a document with several problems lists
// each at its own place.
func TestLoadErrorsPointAtFieldAndCharacter(t *testing.T) {
	eng := engine.New(exprlang.New())
	tests := []struct {
		name, doc string
		want      []string
	}{
		{"unknown field in a flow mapping", `# comment
name: a
match:
  gvk: [{group: "", knd: Pod}]
rule: 'true'
`, []string{`r.yaml:4:21: unknown field "match.gvk[0].knd": did you mean "kind"?`}},
		{"every unknown field, each located", `name: a
sevrity: high
match: {gvk: [{kind: Pod}], namespace: {include: [x]}}
rule: 'true'
`, []string{`r.yaml:2:1: unknown field "sevrity"`, `r.yaml:3:29: unknown field "match.namespace": did you mean "namespaces"?`}},
		{"enum in a custom resource", `apiVersion: portal.io/v1alpha1
kind: PortalClusterRule
metadata: {name: c}
spec:
  enforcementAction: block
  match: {gvk: [{kind: Pod}], operations: [CREATE, PATCH]}
  rule: 'true'
`, []string{`r.yaml:5:22: enforcementAction "block"`, `r.yaml:6:52: match.operations[1]: "PATCH"`}},
		{"wrong type", "name: a\nmatch: {gvk: {kind: Pod}}\nrule: 'true'\n", []string{"r.yaml:2:14: "}},
		{"a rule on Portal's own reports", "name: a\nmatch: {gvk: [{group: wgpolicyk8s.io, kind: PolicyReport}]}\nrule: 'true'\n",
			[]string{"match.gvk[0]: PolicyReport.wgpolicyk8s.io is what Portal writes its findings to"}},
		{"alert past its bound", "name: a\nmatch: {gvk: [{kind: Pod}]}\nrule: 'true'\nalert: " + strings.Repeat("A", 300) + "\n",
			[]string{"alert is 300 characters, more than 253"}},
		{"expression, plain scalar", "name: a\nmatch: {gvk: [{kind: Pod}]}\nrule: object.spec.x == = 1\n", []string{"r.yaml:3:24: "}},
		{"expression, literal block", `name: a
match: {gvk: [{kind: Pod}]}
rule: |
  object.spec.hostNetwork == true &&
    object.spec.x ==
`, []string{"r.yaml:5:21: "}},
		{"expression, double quotes", "name: a\nmatch: {gvk: [{kind: Pod}]}\nrule: \"object.a ? 1\"\n", []string{"r.yaml:3:"}},
		{"message hole after another", `name: a
match: {gvk: [{kind: Pod}]}
rule: 'true'
message: 'pod {{ object.metadata.name }} has {{ object.x ]] }}'
`, []string{"r.yaml:4:", "compile message"}},
		{"unclosed message hole", `name: a
match: {gvk: [{kind: Pod}]}
rule: 'true'
message: 'a {{ object.x }} b {{ object.y'
`, []string{"r.yaml:4:30: ", "unclosed {{ at character 20"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := rule.CompileFile(eng, "r.yaml", []byte(tt.doc))
			if len(errs) == 0 {
				t.Fatal("the rule loaded")
			}
			all := ""
			for _, e := range errs {
				all += e.Error() + "\n"
			}
			for _, w := range tt.want {
				if !strings.Contains(all, w) {
					t.Errorf("errors do not contain %q:\n%s", w, all)
				}
			}
		})
	}
}

// FuzzParseFile feeds arbitrary bytes to the rule file parser: it must never
// panic, and every document must come back either as a rule or as an error.
func FuzzParseFile(f *testing.F) {
	f.Add([]byte(mixedFile))
	f.Add([]byte("name: a\nmatch: {gvk: [{kind: Pod}]}\nrule: 'true'\nsevrity: high\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("name: a\nmatch: {gvk: [{kind: Pod}]}\nrule: >\n  object.a ==\n  ]\nmessage: \"{{ x ]] }} {{\"\n"))
	f.Add([]byte("apiVersion: portal.io/v1alpha1\nkind: PortalRule\n"))
	f.Add([]byte("{\"name\": \"j\", \"rule\": \"true\", \"match\": {\"gvk\": [{\"kind\": \"Pod\"}]}}"))
	eng := engine.New(exprlang.New())
	f.Fuzz(func(t *testing.T, data []byte) {
		rules, errs := rule.ParseFile("fuzz.yaml", data)
		for _, e := range errs {
			if e.Error() == "" {
				t.Fatal("empty error message")
			}
		}
		for _, r := range rules {
			if r.Name == "" || len(r.Match.GVKs) == 0 || r.Expression == "" {
				t.Fatalf("incomplete rule accepted: %+v", r)
			}
			_, _ = eng.Compile(r)
		}
		// Locating compile errors reads positions inside scalars.
		_, errs = rule.CompileFile(eng, "fuzz.yaml", data)
		for _, e := range errs {
			if e.Error() == "" {
				t.Fatal("empty error message")
			}
		}
	})
}

// TestSugarFieldsAreTypedAtCompileTime: a misspelt pod sugar field is a load
// error at its character with the field meant, in the expression and in a
// message hole; object.* and the raw maps stay open.
func TestSugarFieldsAreTypedAtCompileTime(t *testing.T) {
	eng := engine.New(exprlang.New())
	const head = "name: a\nmatch: {gvk: [{kind: Pod}]}\n"
	bad := []struct {
		name, doc string
		want      []string
	}{
		{"expression", head + "rule: container.imag.registry != 'ghcr.io'\n",
			[]string{"r.yaml:3:17: ", "unknown field container.imag: did you mean container.image?"}},
		{"nested", head + "rule: container.securityContext.capabilities.ad contains 'X'\n",
			[]string{"r.yaml:3:46: ", "did you mean container.securityContext.capabilities.add?"}},
		{"optional chain", head + "rule: container?.image?.tg == 'latest'\n",
			[]string{"r.yaml:3:25: ", "did you mean container.image.tag?"}},
		{"a value has no fields", head + "rule: container.name.first == 'x'\n",
			[]string{"r.yaml:3:22: ", "container.name is a value"}},
		{"pod-level sugar", head + "rule: spec.hostNetwrk == true\n",
			[]string{"r.yaml:3:12: ", "did you mean spec.hostNetwork?", "object.*"}},
		{"message hole", head + "rule: container.name == 'x'\nmessage: 'container {{ container.nme }} is bad'\n",
			[]string{"r.yaml:4:34: ", "did you mean container.name?"}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := rule.CompileFile(eng, "r.yaml", []byte(tt.doc))
			if len(errs) != 1 {
				t.Fatalf("errors %v, want one", errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(errs[0].Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, errs[0])
				}
			}
		})
	}
	for _, expr := range []string{
		"object.spec.anything.at.all == 1",
		"container.raw.resources.limits.cpu == '1'",
		"metadata.labels.team == 'a' && metadata.annotations['x/y'] == 'z'",
		"pod.spec.volumes[0].hostPath.path == '/'",
		"request.userInfo.username == 'x' && request.oldObject.spec.x == 1",
		"container.ports[0].containerPort == 80",
		"all(container.securityContext.capabilities.add, # != 'NET_ADMIN')",
		"any(object.spec.containers, .name == 'x')",
	} {
		if _, errs := rule.CompileFile(eng, "r.yaml", []byte(head+"rule: \""+expr+"\"\n")); len(errs) > 0 {
			t.Errorf("%s: %v", expr, errs)
		}
	}
}

// Only a built-in group paired with a kind another built-in group holds is
// refused: custom groups, kinds newer than client-go and legacy homes load.
func TestBuiltinGroupCheckLeavesOtherKinds(t *testing.T) {
	doc := `name: a
match:
  gvk:
    - {group: example.com, kind: Deployment}
    - {group: "", kind: Widget}
    - {group: extensions, kind: Deployment}
    - {group: events.k8s.io, kind: Event}
    - {group: "", kind: Event}
rule: 'true'
`
	if _, errs := rule.ParseFile("r.yaml", []byte(doc)); len(errs) > 0 {
		t.Fatalf("refused: %v", errs)
	}
}
