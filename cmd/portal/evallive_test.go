package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/manifest"
)

// liveCluster starts a control plane holding the objects of evalManifests
// and returns a kubeconfig file for it.
func liveCluster(t *testing.T) (*devcluster.Cluster, string) {
	t.Helper()
	cl, err := devcluster.Start(context.Background(), devcluster.Options{CRDDirectoryPaths: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx := t.Context()
	cs := kubernetes.NewForConfigOrDie(cl.Config)
	dyn := dynamic.NewForConfigOrDie(cl.Config)
	docs, err := manifest.ReadPaths([]string{evalManifests}, nil)
	if err != nil {
		t.Fatal(err)
	}
	namespaces := map[string]bool{}
	for _, d := range docs {
		objs, err := d.Objects()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if ns := o.GetNamespace(); !namespaces[ns] {
				namespaces[ns] = true
				if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			gvk := o.GroupVersionKind()
			gvr := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: strings.ToLower(gvk.Kind) + "s"}
			if _, err := dyn.Resource(gvr).Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create %s %s: %v", gvk.Kind, o.GetName(), err)
			}
		}
	}
	kc, err := cl.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return cl, path
}

// sortedResults decodes a JSON report and returns its results, each as
// canonical JSON, sorted, with its summary.
func sortedResults(t *testing.T, out string) ([]string, map[string]int) {
	t.Helper()
	var report struct {
		Results []json.RawMessage `json:"results"`
		Summary map[string]int    `json:"summary"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("decode report: %v\n%s", err, out)
	}
	var results []string
	for _, r := range report.Results {
		var v any
		if err := json.Unmarshal(r, &v); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(v)
		results = append(results, string(b))
	}
	slices.Sort(results)
	return results, report.Summary
}

// eval --kubeconfig on a cluster holding the example manifests reports what
// eval on the manifest files reports, with the same exit status; --context
// picks the kubeconfig's context, and a cluster that refuses a list fails
// the run instead of passing on part of the objects.
func TestEvalKubeconfigMatchesFiles(t *testing.T) {
	_, kubeconfig := liveCluster(t)
	fromFiles, err := runCLI(t, "", "eval", "--rules", evalRules, "--file", evalManifests, "-o", "json")
	if code := exitCodeOf(err); code != exitViolation {
		t.Fatalf("eval on files: exit %d, want %d: %v", code, exitViolation, err)
	}
	live, err := runCLI(t, "", "eval", "--rules", evalRules, "--kubeconfig", kubeconfig, "-o", "json")
	if code := exitCodeOf(err); code != exitViolation {
		t.Fatalf("eval --kubeconfig: exit %d, want %d: %v", code, exitViolation, err)
	}
	want, wantSummary := sortedResults(t, fromFiles)
	got, gotSummary := sortedResults(t, live)
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("live results differ from the files'\nlive:  %v\nfiles: %v", got, want)
	}
	if !mapsEqual(gotSummary, wantSummary) {
		t.Errorf("summary %v, want %v", gotSummary, wantSummary)
	}

	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	current := cfg.Contexts[cfg.CurrentContext]
	// A context whose user may list nothing: impersonating a user no
	// RBAC rule names.
	nobody := *cfg.AuthInfos[current.AuthInfo]
	nobody.Impersonate = "nobody"
	cfg.AuthInfos["nobody"] = &nobody
	cfg.Contexts["restricted"] = &clientcmdapi.Context{Cluster: current.Cluster, AuthInfo: "nobody"}
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	table, err := runCLI(t, "", "eval", "--rules", evalRules, "--kubeconfig", kubeconfig, "--context", cfg.CurrentContext)
	if code := exitCodeOf(err); code != exitViolation || !strings.Contains(table, "debug-tools") {
		t.Errorf("--context %s: exit %d (%v), table:\n%s", cfg.CurrentContext, code, err, table)
	}
	_, err = runCLI(t, "", "eval", "--rules", evalRules, "--kubeconfig", kubeconfig, "--context", "restricted")
	if code := exitCodeOf(err); code != exitUsage || err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("a forbidden list: exit %d, %v; want %d naming the refusal", code, err, exitUsage)
	}
	_, err = runCLI(t, "", "eval", "--rules", evalRules, "--kubeconfig", kubeconfig, "--context", "no-such-context")
	if code := exitCodeOf(err); code != exitUsage || !strings.Contains(err.Error(), "no-such-context") {
		t.Errorf("an unknown context: exit %d, %v", code, err)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// The input flags that cannot work together are refused with what to do.
func TestEvalInputFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rules", evalRules}, "--file or --kubeconfig"},
		{[]string{"--rules", evalRules, "--file", evalManifests, "--kubeconfig", "kc"}, "exclusive"},
		{[]string{"--rules", evalRules, "--file", evalManifests, "--context", "prod"}, "--context needs --kubeconfig"},
		{[]string{"--rules", evalRules, "--file", "-", "--cluster-state", "-"}, "standard input"},
		{[]string{"--rules", evalRules, "--kubeconfig", filepath.Join(t.TempDir(), "missing")}, "--kubeconfig"},
	} {
		_, err := runCLI(t, "", append([]string{"eval"}, tc.args...)...)
		if exitCodeOf(err) != exitUsage || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("eval %v: %v, want exit %d saying %q", tc.args, err, exitUsage, tc.want)
		}
	}
}

// --cluster-state loads its manifests as the cluster lookups read, and a
// problem in them fails the run at its file and line before anything is
// evaluated.
func TestEvalClusterState(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "state.yaml")
	if err := os.WriteFile(good, []byte(`apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: demo}
spec: {minAvailable: 1, selector: {matchLabels: {app.kubernetes.io/name: web}}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := runCLI(t, "", "eval", "--rules", evalRules, "--file", evalManifests, "--cluster-state", good)
	if code := exitCodeOf(err); code != exitViolation {
		t.Fatalf("with a valid cluster state: exit %d, %v", code, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(`apiVersion: v1
kind: Service
metadata: {name: web, namespace: demo}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: demo}
---
apiVersion: v1
kind: ConfigMap
metadata: {namespace: demo}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: [broken
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "", "eval", "--rules", evalRules, "--file", evalManifests, "--cluster-state", bad)
	if code := exitCodeOf(err); code != exitUsage || out != "" {
		t.Fatalf("a broken cluster state: exit %d, output %q", code, out)
	}
	for _, want := range []string{
		bad + ":5: Service demo/web is defined twice, first at " + bad + ":1",
		bad + ":9: ConfigMap has no metadata.name",
		bad + ":15: did not find expected",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
}
