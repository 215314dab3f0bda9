package migrate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/internal/context/pod"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/rule"
)

// pocRule is the POC rule schema, read independently of the migrator.
type pocRule struct {
	Name   string `json:"name"`
	Filter struct {
		Namespace []string `json:"namespace"`
	} `json:"filter"`
	Rule string `json:"rule"`
}

// fixturePods reads the pods under testdata/pods.
func fixturePods(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	docs, err := manifest.ReadPaths([]string{"testdata/pods"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pods []*unstructured.Unstructured
	for _, d := range docs {
		objs, err := d.Objects()
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, objs...)
	}
	return pods
}

// spelViolations evaluates the original SpEL rule the way the POC did: once
// per container when it reads `container`, else once per pod, in the
// namespaces its filter names. It returns "pod/container" for each
// violation ("pod/" for pod-level rules).
func spelViolations(t *testing.T, r pocRule, ast Node, obj *unstructured.Unstructured) []string {
	t.Helper()
	if len(r.Filter.Namespace) > 0 && !slices.Contains(r.Filter.Namespace, obj.GetNamespace()) {
		return nil
	}
	ectx, err := pod.Builder{}.Build(obj, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(container string) []string {
		v, err := Eval(ast, ectx.Env)
		if err != nil {
			// The POC logged evaluation errors and raised no alert; the
			// fixtures are chosen so none happen.
			t.Errorf("%s on %s/%s: SpEL evaluation error: %v", r.Name, obj.GetName(), container, err)
			return nil
		}
		if v == true {
			return []string{obj.GetName() + "/" + container}
		}
		return nil
	}
	if !UsesName(ast, "container") {
		return check("")
	}
	var out []string
	for _, c := range ectx.Containers {
		ectx.Env["container"] = c.Sugar
		out = append(out, check(c.Name)...)
	}
	return out
}

// portalViolations evaluates a compiled rule through the real engine.
func portalViolations(t *testing.T, eng *engine.Engine, obj *unstructured.Unstructured) []string {
	t.Helper()
	results, err := eng.Evaluate(context.Background(), obj, engine.Options{Mode: core.ModeAudit})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, res := range results {
		switch res.Outcome {
		case core.OutcomeFail:
			out = append(out, obj.GetName()+"/"+res.Container)
		case core.OutcomeError:
			t.Errorf("%s on %s/%s: Portal evaluation error: %s", res.Rule.Name, obj.GetName(), res.Container, res.Message)
		}
	}
	return out
}

// wantViolations pins what each example rule flags on the fixtures, so the
// two evaluators cannot agree on a wrong answer.
var wantViolations = map[string][]string{
	"privileged container":              {"privileged/setup", "privileged/app"},
	"host network":                      {"hostnet/"},
	"latest tag or unapproved registry": {"bare/web", "root-user/overrides", "capabilities/app", "capabilities/debugger"},
	"run as root":                       {"bare/web", "root-user/inherits", "hostnet/agent", "allowed-hostnet/exporter"},
	"missing readOnlyRootFilesystem":    {"bare/web", "root-user/overrides", "capabilities/debugger"},
	"dangerous capabilities":            {"capabilities/app", "capabilities/debugger", "hostnet/agent"},
}

// TestPOCRulesAgree feeds every fixture pod through each original SpEL rule
// and through its migrated Portal rule, and asserts the same violations, per
// container.
func TestPOCRulesAgree(t *testing.T) {
	pods := fixturePods(t)
	for _, path := range pocFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var orig pocRule
		if err := yaml.Unmarshal(data, &orig); err != nil {
			t.Fatal(err)
		}
		ast, err := Parse(orig.Rule)
		if err != nil {
			t.Fatal(err)
		}
		eng := migratedEngine(t, path, data)
		var all []string
		for _, obj := range pods {
			spel := spelViolations(t, orig, ast, obj)
			portal := portalViolations(t, eng, obj)
			slices.Sort(spel)
			slices.Sort(portal)
			if !slices.Equal(spel, portal) {
				t.Errorf("%s on pod %s: SpEL flags %v, Portal flags %v", orig.Name, obj.GetName(), spel, portal)
			}
			all = append(all, spel...)
		}
		want := slices.Clone(wantViolations[orig.Name])
		slices.Sort(all)
		slices.Sort(want)
		if !slices.Equal(all, want) {
			t.Errorf("%s (%s) flags %v, want %v", orig.Name, filepath.Base(path), all, want)
		}
	}
}

// migratedEngine migrates one POC file and loads it into an engine.
func migratedEngine(t *testing.T, path string, data []byte) *engine.Engine {
	t.Helper()
	out, err := Migrate(path, data, FormatFolder)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(exprlang.New())
	rules, errs := rule.CompileFile(eng, path, out)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	eng.SetRules(rules)
	return eng
}

// constructs exercise translations the example rules do not use. Each is
// evaluated both ways on every container of every fixture.
var constructs = []string{
	`(metadata.labels['team'] ?: 'none') == 'none'`,
	`(object.spec.securityContext?.runAsUser ?: 1) == 0`,
	`spec.hostNetwork == true ? container.name != 'agent' : false`,
	`container.command.size() > 2 or container.args.isEmpty() and container.name.length() < 4`,
	`metadata.labels.containsKey('portal.io/allow-host-network')`,
	`container.image.registry matches '.*\.io' and !container.image.name.startsWith('acme/')`,
	`container.image.name.endsWith('/app') || container.image.name.contains('node')`,
	`object.spec.containers[0].command?.contains('sh')`,
	`pod.spec.securityContext?.runAsUser lt 1 and metadata.namespace ne 'staging'`,
	`container.securityContext.runAsUser GE 1000`,
	`container.name.toUpperCase() == 'APP' or container.containerType.toLowerCase() eq 'initcontainer'`,
	`{0, 1000L}.contains(securityContext.runAsUser ?: -1)`,
	`not {'ALL'}.contains(container.securityContext.capabilities.drop.isEmpty() ? 'none' : container.securityContext.capabilities.drop[0])`,
	`container.ports.isEmpty() and spec.hostPID != true and object?.kind == 'Pod'`,
	`object.spec.volumes?.size() > 0 and container.securityContext.seccompProfileType == null`,
	`container.securityContext.runAsUser > 999 or securityContext.runAsUser lt container.securityContext.runAsUser`,
	`securityContext.runAsUser ge container.securityContext.runAsUser and securityContext.runAsUser != 0`,
	`1 > pod.spec.securityContext?.runAsUser or 10000 <= securityContext.runAsUser`,
}

// TestConstructsAgree checks each construct's translation against the SpEL
// evaluator on the fixtures.
func TestConstructsAgree(t *testing.T) {
	pods := fixturePods(t)
	for i, src := range constructs {
		ast, err := Parse(src)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		translated, err := Translate(ast)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		name := fmt.Sprintf("construct %d", i)
		eng := engine.New(exprlang.New())
		r, err := eng.Compile(&core.Rule{Name: name, Enabled: true, Modes: []core.Mode{core.ModeAudit},
			Match: core.Match{GVKs: []core.GVK{{Version: "v1", Kind: "Pod"}}}, Expression: translated})
		if err != nil {
			t.Fatalf("%s -> %s: %v", src, translated, err)
		}
		eng.SetRules([]*engine.Rule{r})
		flagged, passed := 0, 0
		for _, obj := range pods {
			spel := spelViolations(t, pocRule{Name: name}, ast, obj)
			portal := portalViolations(t, eng, obj)
			slices.Sort(spel)
			slices.Sort(portal)
			if !slices.Equal(spel, portal) {
				t.Errorf("%s\n  -> %s\n  on pod %s: SpEL flags %v, Portal flags %v", src, translated, obj.GetName(), spel, portal)
			}
			if len(spel) > 0 {
				flagged++
			} else {
				passed++
			}
		}
		if flagged == 0 || passed == 0 {
			t.Errorf("%s: flags %d and passes %d fixture pods; a useful check does both", src, flagged, passed)
		}
	}
	if t.Failed() {
		t.Log("fixtures:", strings.Join(podNames(pods), ", "))
	}
}

func podNames(pods []*unstructured.Unstructured) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.GetName())
	}
	return out
}
