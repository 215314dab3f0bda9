package apigateway_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
	"github.com/vilaca/portal/internal/apigateway/apirule"
	"github.com/vilaca/portal/internal/apigateway/kube"
	"github.com/vilaca/portal/internal/apigateway/ratelimit"
	"github.com/vilaca/portal/internal/devcluster"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

var (
	virtualServices        = schema.GroupVersionKind{Group: "networking.istio.io", Version: "v1", Kind: "VirtualServiceList"}
	authorizationPolicies  = schema.GroupVersionKind{Group: "security.istio.io", Version: "v1", Kind: "AuthorizationPolicyList"}
	requestAuthentications = schema.GroupVersionKind{Group: "security.istio.io", Version: "v1", Kind: "RequestAuthenticationList"}
	envoyFilters           = schema.GroupVersionKind{Group: "networking.istio.io", Version: "v1alpha3", Kind: "EnvoyFilterList"}
)

// istioctl returns bin/istioctl, failing the test when it has not been
// built: Istio's own validation is part of what these tests check.
func istioctl(t *testing.T) string {
	t.Helper()
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "bin", "istioctl")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run make tools (or make bin/istioctl)", p)
	}
	return p
}

// generated reads back, from the API server, the objects of the given kinds
// labelled with labels in ns, without the fields the server fills in.
func generated(t *testing.T, ctx context.Context, ns string, labels map[string]string, kinds ...schema.GroupVersionKind) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, k := range kinds {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(k)
		if err := k8s.List(ctx, l, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			t.Fatal(err)
		}
		for i := range l.Items {
			u := &l.Items[i]
			for _, f := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"} {
				unstructured.RemoveNestedField(u.Object, "metadata", f)
			}
			refs := u.GetOwnerReferences()
			for j := range refs {
				refs[j].UID = ""
			}
			u.SetOwnerReferences(refs)
			out = append(out, u)
		}
	}
	return out
}

// golden compares objs with testdata/golden/<name>.yaml (rewrites it with
// -update) and writes each object to its own file in dir for istioctl.
func golden(t *testing.T, name string, objs []*unstructured.Unstructured, dir string) {
	t.Helper()
	var b bytes.Buffer
	for i, o := range objs {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(data)
		f := filepath.Join(dir, strings.ReplaceAll(name, "/", "-")+"-"+strings.ToLower(o.GetKind())+"-"+o.GetName()+".yaml")
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join("testdata", "golden", name+".yaml")
	if *update {
		if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestCorpus ./internal/apigateway -update to write it)", err)
	}
	if !bytes.Equal(want, b.Bytes()) {
		t.Errorf("%s differs from what the controller generated (rerun with -update if the change is intended):\n--- got\n%s", path, b.String())
	}
}

// fixture writes a fixture object for istioctl analyze.
func fixture(t *testing.T, dir string, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		gvk, err := apiutil.GVKForObject(o, k8s.Scheme())
		if err != nil {
			t.Fatal(err)
		}
		o.GetObjectKind().SetGroupVersionKind(gvk)
		u, err := kube.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"} {
			unstructured.RemoveNestedField(u.Object, "metadata", f)
		}
		unstructured.RemoveNestedField(u.Object, "status")
		data, err := yaml.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, "fixture-"+strings.ToLower(u.GetKind())+"-"+u.GetNamespace()+"-"+u.GetName()+".yaml")
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestCorpus reconciles every APIRule and RateLimit under testdata on the
// real API server, compares what the controllers wrote with the golden
// files, and has Istio's own istioctl validate each object and analyze them
// all together with the gateway, namespaces, Services and pods they refer to.
func TestCorpus(t *testing.T) {
	ctx := setup(t)
	gen, fix := t.TempDir(), t.TempDir()
	gw := istioGateway(t, ctx, "istio-system", "corpus-gateway", "*.example.com")
	fixture(t, fix, gw, &corev1.Namespace{TypeMeta: metaType("v1", "Namespace"), ObjectMeta: objMeta("", "istio-system", nil)})

	var created []client.Object
	t.Cleanup(func() {
		// Leave no RateLimit on the ingress gateway or APIRule behind
		// for the APIGateway tests.
		for _, o := range created {
			_ = k8s.Delete(context.Background(), o)
			gone(t, context.Background(), o)
		}
	})
	files, _ := filepath.Glob(filepath.Join("testdata", "apirules", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no corpus")
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		api := &gatewayv1alpha1.APIRule{}
		readYAML(t, f, api)
		api.Namespace = namespace(t, ctx, "corpus-"+dnsName(name))
		fixture(t, fix, &corev1.Namespace{TypeMeta: metaType("v1", "Namespace"), ObjectMeta: objMeta("", api.Namespace, map[string]string{"istio-injection": "enabled"})})
		for name, port := range servicesOf(api) {
			fixture(t, fix, workload(t, ctx, api.Namespace, name, port, true, nil)...)
		}
		if err := k8s.Create(ctx, api); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		created = append(created, api)
		waitState(t, ctx, api, gatewayv1alpha1.StateReady)
		objs := generated(t, ctx, api.Namespace, map[string]string{apirule.LabelAPIRule: api.Name}, virtualServices, authorizationPolicies, requestAuthentications)
		golden(t, "apirules/"+name, objs, gen)
	}

	files, _ = filepath.Glob(filepath.Join("testdata", "ratelimits", "*.yaml"))
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		rl := &gatewayv1alpha1.RateLimit{}
		readYAML(t, f, rl)
		rl.Namespace = namespace(t, ctx, "corpus-rl-"+dnsName(name))
		fixture(t, fix, &corev1.Namespace{TypeMeta: metaType("v1", "Namespace"), ObjectMeta: objMeta("", rl.Namespace, map[string]string{"istio-injection": "enabled"})})
		if rl.Spec.SelectorLabels["istio"] == "ingressgateway" {
			fixture(t, fix, workload(t, ctx, rl.Namespace, "istio-ingressgateway", 8080, false, map[string]string{"istio": "ingressgateway"})...)
		} else {
			fixture(t, fix, workload(t, ctx, rl.Namespace, rl.Spec.SelectorLabels["app"], 8000, true, nil)...)
		}
		if err := k8s.Create(ctx, rl); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		created = append(created, rl)
		waitState(t, ctx, rl, gatewayv1alpha1.StateReady)
		golden(t, "ratelimits/"+name, generated(t, ctx, rl.Namespace, map[string]string{ratelimit.LabelRateLimit: rl.Name}, envoyFilters), gen)
	}
	if t.Failed() {
		return
	}

	bin := istioctl(t)
	generatedFiles, _ := filepath.Glob(filepath.Join(gen, "*.yaml"))
	args := []string{"validate"}
	for _, f := range generatedFiles {
		args = append(args, "-f", f)
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Errorf("istioctl validate refused generated objects: %v\n%s", err, out)
	}
	// istioctl reports a nested Envoy proto that does not decode (a wrong
	// field in an EnvoyFilter) as a warning; only its standing caution on
	// every EnvoyFilter is expected.
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "* ") && !strings.Contains(line, "EnvoyFilter exposes internal implementation details") {
			t.Errorf("istioctl validate warns: %s", strings.TrimSpace(line))
		}
	}
	fixtures, _ := filepath.Glob(filepath.Join(fix, "*.yaml"))
	out, err = exec.CommandContext(ctx, bin, append([]string{"analyze", "--use-kube=false", "--failure-threshold", "Error"}, append(fixtures, generatedFiles...)...)...).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	if err != nil {
		t.Errorf("istioctl analyze found errors in the generated configuration: %v\n%s", err, out)
	}
	t.Logf("istioctl analyze:\n%s", out)
}
