package podsecurity_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/pod-security-admission/api"
	"k8s.io/utils/ptr"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

// levels are the PSS levels the bundle implements, each with the rule
// folders that make it up: the restricted level is both folders together.
var levels = []struct {
	level api.Level
	dirs  []string
}{
	{api.LevelBaseline, []string{"baseline"}},
	{api.LevelRestricted, []string{"baseline", "restricted"}},
}

// podKind is a kind that carries a pod, and where it keeps it.
type podKind struct {
	apiVersion, kind string
	path             []string // nil for a Pod
}

// podKinds are every kind the rules match.
var podKinds = []podKind{
	{"v1", "Pod", nil},
	{"v1", "PodTemplate", []string{"template"}},
	{"v1", "ReplicationController", []string{"spec", "template"}},
	{"apps/v1", "Deployment", []string{"spec", "template"}},
	{"apps/v1", "StatefulSet", []string{"spec", "template"}},
	{"apps/v1", "DaemonSet", []string{"spec", "template"}},
	{"apps/v1", "ReplicaSet", []string{"spec", "template"}},
	{"batch/v1", "Job", []string{"spec", "template"}},
	{"batch/v1", "CronJob", []string{"spec", "jobTemplate", "spec", "template"}},
}

// loadLevels compiles the rules of every level into its own engine.
func loadLevels(t *testing.T) map[api.Level]*engine.Engine {
	t.Helper()
	out := map[api.Level]*engine.Engine{}
	for _, l := range levels {
		eng := engine.New(exprlang.New())
		rules, errs := rule.LoadPaths(eng, l.dirs)
		for _, err := range errs {
			t.Errorf("load %s rules: %v", l.level, err)
		}
		if len(rules) == 0 {
			t.Fatalf("level %s: no rules loaded from %v", l.level, l.dirs)
		}
		eng.SetRules(rules)
		out[l.level] = eng
	}
	if t.Failed() {
		t.FailNow()
	}
	return out
}

// applyDefaults does the part of the API server's defaulting
// (k8s.io/kubernetes/pkg/apis/core/v1 SetDefaults_*) that the checks can see.
// k8s.io/kubernetes cannot be required from this module without replace
// directives for every staging module, so it is reproduced by hand:
//   - SetDefaults_Volume: a volume with no source becomes an emptyDir;
//   - SetDefaults_PodSpec: a nil pod securityContext becomes {};
//   - SetDefaults_Pod (Pods only, not templates): with hostNetwork, every
//     container and init container port's hostPort defaults to its
//     containerPort.
func applyDefaults(spec *corev1.PodSpec, isPod bool) {
	for i := range spec.Volumes {
		if ptr.AllPtrFieldsNil(&spec.Volumes[i].VolumeSource) {
			spec.Volumes[i].VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		}
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if isPod && spec.HostNetwork {
		for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
			for i := range cs {
				for j := range cs[i].Ports {
					if cs[i].Ports[j].HostPort == 0 {
						cs[i].Ports[j].HostPort = cs[i].Ports[j].ContainerPort
					}
				}
			}
		}
	}
}

// encodings turn a typed object into the map Portal evaluates: the
// converter's (int64 numbers, as in the API server's own unstructured
// objects) and plain JSON decoding (float64 numbers, as in decoded YAML or
// admission review payloads).
var encodings = []struct {
	name   string
	encode func(obj any) (map[string]any, error)
}{
	{"unstructured", runtime.DefaultUnstructuredConverter.ToUnstructured},
	{"json", func(obj any) (map[string]any, error) {
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		return m, json.Unmarshal(b, &m)
	}},
}

// wrap returns pod as an object of kind k: the pod itself, or a workload whose
// pod template holds pod's metadata and spec. The caller defaults pod first.
func wrap(pod *corev1.Pod, k podKind, encode func(any) (map[string]any, error)) (*unstructured.Unstructured, error) {
	m, err := encode(pod)
	if err != nil {
		return nil, err
	}
	if k.path == nil {
		m["apiVersion"], m["kind"] = k.apiVersion, k.kind
		return &unstructured.Unstructured{Object: m}, nil
	}
	template := map[string]any{"metadata": m["metadata"], "spec": m["spec"]}
	obj := map[string]any{
		"apiVersion": k.apiVersion,
		"kind":       k.kind,
		"metadata":   map[string]any{"name": pod.Name, "namespace": pod.Namespace},
	}
	at := obj
	for _, p := range k.path[:len(k.path)-1] {
		next := map[string]any{}
		at[p] = next
		at = next
	}
	at[k.path[len(k.path)-1]] = template
	return &unstructured.Unstructured{Object: obj}, nil
}

// verdict is Portal's decision on one object at one level.
type verdict struct {
	denied bool
	// failing lists the rules that failed, with their messages.
	failing []string
}

func (v verdict) String() string {
	if !v.denied {
		return "allow"
	}
	return "deny by " + strings.Join(v.failing, "; ")
}

// evaluate runs eng on obj in admission mode. A rule that errors, or a
// message that renders an error, a nil or a line break, is an error: the
// bundle must never fail to evaluate.
func evaluate(eng *engine.Engine, obj *unstructured.Unstructured) (verdict, error) {
	results, err := eng.Evaluate(context.Background(), obj, engine.Options{Mode: core.ModeAdmission})
	if err != nil {
		return verdict{}, err
	}
	var v verdict
	var errs []string
	for _, r := range results {
		switch r.Outcome {
		case core.OutcomeError:
			errs = append(errs, fmt.Sprintf("%s: %s", r.Rule.Name, r.Message))
		case core.OutcomeFail:
			if strings.Contains(r.Message, "<error:") || strings.Contains(r.Message, "<nil>") || strings.Contains(r.Message, "\n") {
				errs = append(errs, fmt.Sprintf("%s: message renders badly: %q", r.Rule.Name, r.Message))
			}
			where := ""
			if r.Container != "" {
				where = fmt.Sprintf(" [%s %s]", r.ContainerType, r.Container)
			}
			v.failing = append(v.failing, fmt.Sprintf("%s%s: %s", r.Rule.Name, where, r.Message))
		}
		if r.Denies() {
			v.denied = true
		}
	}
	if len(errs) > 0 {
		return v, fmt.Errorf("rules errored: %s", strings.Join(errs, "; "))
	}
	return v, nil
}

// psaDir is where the module cache holds k8s.io/pod-security-admission.
func psaDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/pod-security-admission").Output()
	if err != nil {
		t.Fatalf("locate k8s.io/pod-security-admission: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		t.Fatal("k8s.io/pod-security-admission has no directory: run go mod download")
	}
	return dir
}

// kebab turns a check id into a rule file name: appArmorProfile ->
// app-armor-profile.
func kebab(id string) string {
	var b strings.Builder
	for i, r := range id {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ruleFiles lists the rule files of one level folder.
func ruleFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		files[i] = filepath.Base(f)
	}
	slices.Sort(files)
	return files
}
