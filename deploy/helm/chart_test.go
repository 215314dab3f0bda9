// Package helm_test checks the Portal chart in deploy/helm/portal: golden
// `helm template` outputs for the main value combinations, the values a
// render refuses, the CRDs it ships, and (apiserver_test.go) that a real API
// server accepts what it renders and that its RBAC is enough for Portal.
//
// UPDATE_GOLDEN=1 go test ./deploy/helm/ rewrites the golden files and the
// chart's copy of deploy/crds (make helm-golden).
package helm_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vilaca/portal/internal/devcluster"
)

const (
	chartDir    = "portal"
	valuesDir   = "testdata/values"
	goldenDir   = "testdata/golden"
	releaseName = "portal"
	releaseNS   = "portal-system"
)

func update() bool { return os.Getenv("UPDATE_GOLDEN") != "" }

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helmBinary is bin/helm, built from hack/tools/helm (as `make tools` does)
// when missing.
func helmBinary(t testing.TB) string {
	t.Helper()
	helmOnce.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			helmErr = err
			return
		}
		helmPath = filepath.Join(root, "bin", "helm")
		if _, err := os.Stat(helmPath); err == nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", helmPath, "helm.sh/helm/v4/cmd/helm")
		cmd.Dir = filepath.Join(root, "hack", "tools", "helm")
		if out, err := cmd.CombinedOutput(); err != nil {
			helmErr = errors.New("build bin/helm from hack/tools/helm: " + err.Error() + "\n" + string(out))
		}
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}

// render runs helm template on the chart with the values file (none when
// empty) and --set arguments.
func render(t testing.TB, valuesFile string, set ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", releaseName, chartDir, "--namespace", releaseNS}
	if valuesFile != "" {
		args = append(args, "--values", valuesFile)
	} else {
		// The one choice the chart cannot make (TestWebhookNetworkPolicyNeedsAChoice).
		args = append(args, "--set", "networkPolicy.webhookFromAnywhere=true")
	}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helmBinary(t), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New(stderr.String())
	}
	return out, nil
}

// valueFiles are the cases: testdata/values/<case>.yaml.
func valueFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(valuesDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no value files in %s (%v)", valuesDir, err)
	}
	return files
}

func goldenFile(valuesFile string) string {
	return filepath.Join(goldenDir, filepath.Base(valuesFile))
}

func TestGoldenTemplates(t *testing.T) {
	for _, vf := range valueFiles(t) {
		t.Run(strings.TrimSuffix(filepath.Base(vf), ".yaml"), func(t *testing.T) {
			got, err := render(t, vf)
			if err != nil {
				t.Fatalf("helm template -f %s: %v", vf, err)
			}
			gf := goldenFile(vf)
			if update() {
				if err := os.WriteFile(gf, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(gf)
			if err != nil {
				t.Fatalf("%v: run make helm-golden (UPDATE_GOLDEN=1 go test ./deploy/helm/) to create it", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("helm template -f %s differs from %s; review the change and run make helm-golden:\n%s", vf, gf, lineDiff(string(want), string(got)))
			}
		})
	}
	if update() {
		return
	}
	// A golden file whose values file is gone is stale.
	goldens, _ := filepath.Glob(filepath.Join(goldenDir, "*.yaml"))
	for _, g := range goldens {
		if _, err := os.Stat(filepath.Join(valuesDir, filepath.Base(g))); err != nil {
			t.Errorf("%s has no values file in %s: delete it", g, valuesDir)
		}
	}
}

// lineDiff shows the first lines that differ, enough to find the change.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(w), len(g)) && shown < 20; i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			shown++
			b.WriteString("line " + strconv.Itoa(i+1) + ":\n  golden: " + wl + "\n  render: " + gl + "\n")
		}
	}
	return b.String()
}

// The chart ships deploy/crds unchanged: `make generate` writes there, and
// the chart's copy must follow.
func TestChartCRDsMatchDeployCRDs(t *testing.T) {
	src, err := filepath.Glob("../crds/*.yaml")
	if err != nil || len(src) == 0 {
		t.Fatalf("no CRDs in deploy/crds (%v)", err)
	}
	syncCopies(t, src, filepath.Join(chartDir, "crds"), "deploy/crds")
}

// The chart's files/openreports are the openreports.io CRDs of the
// github.com/openreports/reports-api module go.mod pins, the schemas
// Portal's report sink compiles against.
func TestChartOpenReportsCRDsMatchModule(t *testing.T) {
	paths, err := devcluster.ThirdPartyCRDPaths(devcluster.OpenReports)
	if err != nil {
		t.Fatal(err)
	}
	src, err := filepath.Glob(filepath.Join(paths[0], "*.yaml"))
	if err != nil || len(src) == 0 {
		t.Fatalf("no CRDs in %s (%v)", paths[0], err)
	}
	syncCopies(t, src, filepath.Join(chartDir, "files", "openreports"), "the reports-api module")
}

// syncCopies checks that dir holds exactly a copy of each file of src (or,
// with UPDATE_GOLDEN, makes it so); from names the source in messages.
func syncCopies(t *testing.T, src []string, dir, from string) {
	t.Helper()
	shipped, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	names := map[string]bool{}
	for _, s := range src {
		names[filepath.Base(s)] = true
		want, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, filepath.Base(s))
		if update() {
			if err := os.WriteFile(dst, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(dst)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is not a copy of %s from %s: run make helm-golden", dst, filepath.Base(s), from)
		}
	}
	for _, s := range shipped {
		if names[filepath.Base(s)] {
			continue
		}
		if update() {
			if err := os.Remove(s); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s is not in %s any more: run make helm-golden", s, from)
	}
}

// Values that cannot work stop the render with a message that says what to
// change.
func TestTemplateRefusesUnsafeValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"fail closed without a PodDisruptionBudget", []string{"podDisruptionBudget.enabled=false"}, "global.failClosed requires podDisruptionBudget.enabled"},
		{"no layer", []string{"admission.enabled=false"}, "enable at least one of"},
		{"unknown mode", []string{"global.mode=sharded"}, "/global/mode"},
		{"misspelt value", []string{"replicas=3"}, "additional properties 'replicas' not allowed"},
		{"negative replicas", []string{"replicaCount=-1"}, "/replicaCount"},
		{"bad anti-affinity", []string{"podAntiAffinity=always"}, "/podAntiAffinity"},
		{"bad duration", []string{"audit.resyncPeriod=10 minutes"}, "/audit/resyncPeriod"},
		{"watched kind without resources", []string{"watchedGvks[0].apiGroup=apps"}, "/watchedGvks/0"},
		{"digest that is not one", []string{"image.digest=latest"}, "/image/digest"},
		{"client CA from a ConfigMap and a Secret", []string{"admission.clientCA.configMap=ca", "admission.clientCA.secret=ca"}, "admission.clientCA: set configMap or secret, not both"},
		{"allowed client names without a CA", []string{"admission.clientCA.allowedNames={kube-apiserver}"}, "admission.clientCA.allowedNames needs admission.clientCA.configMap or admission.clientCA.secret"},
		{"client CA key with a slash", []string{"admission.clientCA.secret=ca", "admission.clientCA.key=../ca.crt"}, "/admission/clientCA/key"},
		{"audit log DaemonSet without the runtime layer", []string{"runtime.auditLog.enabled=true"}, "runtime.auditLog.enabled needs runtime.enabled"},
		{"audit log path that is relative", []string{"runtime.auditLog.path=audit.log"}, "/runtime/auditLog/path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, "", tc.set...)
			if err == nil {
				t.Fatalf("helm template --set %v rendered; want an error containing %q", tc.set, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template --set %v: %v\nwant an error containing %q", tc.set, err, tc.want)
			}
		})
	}
}

// helm lint --strict passes with every case's values.
func TestLint(t *testing.T) {
	for _, vf := range append([]string{""}, valueFiles(t)...) {
		args := []string{"lint", "--strict", chartDir, "--namespace", releaseNS}
		if vf != "" {
			args = append(args, "--values", vf)
		}
		out, err := exec.Command(helmBinary(t), args...).CombinedOutput()
		if err != nil {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestWebhookNetworkPolicyNeedsAChoice: the webhook port's NetworkPolicy no
// longer admits every source by default. The API server's source addresses
// are cluster specific, so the chart refuses to render until the operator
// names them, sets a client CA (the port then authenticates its callers), or
// admits any source knowingly; each renders what it says.
func TestWebhookNetworkPolicyNeedsAChoice(t *testing.T) {
	cmd := exec.Command(helmBinary(t), "template", releaseName, chartDir, "--namespace", releaseNS)
	out, err := cmd.CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("networkPolicy: choose who may reach the webhook port")) {
		t.Fatalf("the chart rendered without a choice for the webhook port (err %v):\n%.400s", err, out)
	}
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24"}, "cidr: 10.0.0.0/24"},
		{[]string{"admission.clientCA.configMap=apiserver-ca"}, "the webhook accepts only the API server's client"},
		{[]string{"networkPolicy.webhookFromAnywhere=false", "networkPolicy.enabled=false"}, ""},
	} {
		args := []string{"template", releaseName, chartDir, "--namespace", releaseNS, "--show-only", "templates/deployment.yaml"}
		if tc.want != "" {
			args[len(args)-1] = "templates/networkpolicy.yaml"
		}
		for _, s := range tc.set {
			args = append(args, "--set", s)
		}
		out, err := exec.Command(helmBinary(t), args...).CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte(tc.want)) {
			t.Errorf("%v: %v\n%.600s", tc.set, err, out)
		}
	}
}

// TestWebhookFromLetsReplicasForward: with networkPolicy.webhookFrom naming
// the API server's addresses, Portal's replicas still reach the leader's
// webhook port to forward their verdicts (actions.forwardVerdicts), and only
// while forwarding is on: otherwise every verdict of a replica that does
// not lead was blocked and counted as failed.
func TestWebhookFromLetsReplicasForward(t *testing.T) {
	for _, tc := range []struct {
		set     []string
		replica bool
	}{
		{[]string{"actions.label.enabled=true"}, true},
		{[]string{"actions.label.enabled=true", "actions.forwardVerdicts=false"}, false},
		{nil, false},
	} {
		set := append([]string{"networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24"}, tc.set...)
		out, err := render(t, "", set...)
		if err != nil {
			t.Fatalf("%v: %v", set, err)
		}
		var podLabels map[string]any
		var rules []any
		for _, u := range objects(t, out) {
			switch u.GetKind() {
			case "Deployment":
				podLabels, _, _ = unstructured.NestedMap(u.Object, "spec", "template", "metadata", "labels")
			case "NetworkPolicy":
				rules, _, _ = unstructured.NestedSlice(u.Object, "spec", "ingress")
			}
		}
		replica := false
		for _, r := range rules {
			r := r.(map[string]any)
			ports, _, _ := unstructured.NestedSlice(r, "ports")
			from, _, _ := unstructured.NestedSlice(r, "from")
			if len(ports) != 1 || ports[0].(map[string]any)["port"] != "webhook" || len(from) != 1 {
				continue
			}
			sel, ok, _ := unstructured.NestedStringMap(from[0].(map[string]any), "podSelector", "matchLabels")
			if !ok || len(sel) == 0 {
				continue
			}
			matches := true
			for k, v := range sel {
				matches = matches && podLabels[k] == v
			}
			replica = replica || matches
		}
		if replica != tc.replica {
			t.Errorf("%v: the webhook port admits Portal's own pods: %v, want %v", set, replica, tc.replica)
		}
	}
}
