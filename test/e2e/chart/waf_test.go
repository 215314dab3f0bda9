package chart

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/waf/engine"
)

// The patterns the test sends: xss is what the OWASP CRS blocks (every
// route), attackA what only route A's rule set blocks.
const (
	xssQuery     = "q=%3Cscript%3Ealert(1)%3C%2Fscript%3E"
	attackAQuery = "q=attack-a"
	hostA        = "a.example.test"
	hostB        = "b.example.test"
)

// wafObjects are the workload, the Gateway API objects and the WAF rules
// of TestWAFProxyOnRealNode, in the order they are created: the Gateway's
// pods and Service (the hello image), Gateway edge with two HTTPRoutes by
// hostname, RuleSet crs (the CRS) and RuleSet strict (the CRS and one rule
// that blocks attack-a), and a WAFGatewayBindingPolicy attaching strict to
// route A.
const wafObjects = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: edge-gw}
spec:
  replicas: 1
  selector: {matchLabels: {app: edge-gw}}
  template:
    metadata:
      labels: {app: edge-gw, gateway.networking.k8s.io/gateway-name: edge}
    spec:
      containers:
      - name: hello
        image: ` + devcluster.HelloImage + `
        imagePullPolicy: Never
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata:
  name: edge-gw
  labels: {gateway.networking.k8s.io/gateway-name: edge}
spec:
  selector: {app: edge-gw}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge}
spec:
  gatewayClassName: portal-e2e
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route-a}
spec:
  parentRefs: [{name: edge}]
  hostnames: [` + hostA + `]
  rules: [{backendRefs: [{name: edge-gw, port: 80}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route-b}
spec:
  parentRefs: [{name: edge}]
  hostnames: [` + hostB + `]
  rules: [{backendRefs: [{name: edge-gw, port: 80}]}]
---
apiVersion: waf.portal.io/v1alpha1
kind: RuleSource
metadata: {name: crs}
spec:
  rules: |
    Include @coraza.conf-recommended
    SecRuleEngine On
    Include @crs-setup.conf.example
    Include @owasp_crs/*.conf
---
apiVersion: waf.portal.io/v1alpha1
kind: RuleSource
metadata: {name: attack-a}
spec:
  rules: |
    SecRule ARGS_GET "@contains attack-a" "id:9001,phase:1,deny,status:403,msg:'route A pattern'"
---
apiVersion: waf.portal.io/v1alpha1
kind: RuleSet
metadata: {name: crs}
spec:
  sources: [{name: crs}]
---
apiVersion: waf.portal.io/v1alpha1
kind: RuleSet
metadata: {name: strict}
spec:
  sources: [{name: crs}, {name: attack-a}]
---
apiVersion: waf.portal.io/v1alpha1
kind: WAFGatewayBindingPolicy
metadata: {name: strict-route-a}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: route-a}]
  ruleSet: {name: strict}
---
apiVersion: waf.portal.io/v1alpha1
kind: Engine
metadata: {name: edge-waf}
spec:
  ruleSet: {name: crs}
  target: {type: Gateway, name: edge}
  failurePolicy: fail
  ruleSetCacheServer: {pollIntervalSeconds: 2}
  driver:
    type: waf-proxy
    wafProxy: {replicas: 1}
`

// TestWAFProxyOnRealNode installs the chart with the WAF layer, creates a
// Gateway with two routes and an Engine with the waf-proxy driver, and
// sends requests to the proxy pod Portal deploys: it reaches the cache and
// the Gateway's Service by their cluster DNS names, loads the rule sets
// Portal compiled and blocks what they block.
func TestWAFProxyOnRealNode(t *testing.T) {
	e := newEnv(t)
	ns := e.workload
	// The binding controller starts only when the cluster serves the
	// Gateway API when Portal starts.
	paths, err := devcluster.ThirdPartyCRDPaths(devcluster.GatewayAPIStandard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(e.cl.Config, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	e.install(t, "waf.enabled=true")
	t.Cleanup(func() { e.uninstallWAF(t, ns) })
	t.Cleanup(func() {
		if t.Failed() {
			e.dumpWAF(t, ns)
		}
	})

	for _, o := range decodeObjects(t, wafObjects) {
		o.SetNamespace(ns)
		if err := e.c.Create(context.Background(), o); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	for _, rs := range []string{"crs", "strict"} {
		e.waitRuleSetReady(t, ns, rs)
	}
	proxy := e.waitProxyPod(t, ns, "edge-waf")
	t.Logf("waf-proxy pod at %s", proxy)

	expectVerdicts(t, proxy, "the Engine's RuleSet crs on every route", []verdict{
		{hostA, xssQuery, http.StatusForbidden},
		{hostB, xssQuery, http.StatusForbidden},
		{hostB, "q=hello", http.StatusOK},
		{hostB, attackAQuery, http.StatusOK},
	})
	// Route A's policy attaches RuleSet strict: the proxy reads its
	// Gateway's route table from the cache, and the Engine's RuleSet
	// guards only what no policy covers.
	expectVerdicts(t, proxy, "route A under the policy's RuleSet strict", []verdict{
		{hostA, attackAQuery, http.StatusForbidden},
		{hostA, "q=hello", http.StatusOK},
		{hostB, attackAQuery, http.StatusOK},
	})

	// Move the policy to route B: the verdicts follow without a restart.
	e.patchPolicyTarget(t, ns, "strict-route-a", "route-b")
	expectVerdicts(t, proxy, "the policy moved to route B", []verdict{
		{hostA, attackAQuery, http.StatusOK},
		{hostB, attackAQuery, http.StatusForbidden},
		{hostA, xssQuery, http.StatusForbidden},
	})

	// A tenant's rule set asks the shared proxy to buffer answers of up
	// to 1 GiB: the proxy holds its cap, and the other route answers.
	e.checkResponseCap(t, ns, proxy, "strict-route-a")
}

func decodeObjects(t testing.TB, docs string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(docs, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("decode %q: %v", doc, err)
		}
		out = append(out, u)
	}
	return out
}

func (e *env) waitRuleSetReady(t testing.TB, ns, name string) {
	t.Helper()
	var rs wafv1alpha1.RuleSet
	eventually(t, 3*time.Minute, "RuleSet "+name+" Ready", func(ctx context.Context) (bool, error) {
		if err := e.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &rs); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(rs.Status.Conditions, wafv1alpha1.ConditionReady), nil
	})
}

// waitProxyPod waits for the Engine's waf-proxy pod to be Ready (it is
// once it loaded its rule set from the cache) and returns its address.
func (e *env) waitProxyPod(t testing.TB, ns, engineName string) string {
	t.Helper()
	sel := "app.kubernetes.io/name=waf-proxy,app.kubernetes.io/instance=" + engine.ChildName(engineName)
	var addr string
	eventually(t, 3*time.Minute, "a Ready waf-proxy pod of Engine "+engineName, func(ctx context.Context) (bool, error) {
		pods, err := e.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && podReady(p) && p.Status.PodIP != "" {
				addr = net.JoinHostPort(p.Status.PodIP, "8000")
				return true, nil
			}
		}
		return false, nil
	})
	return addr
}

// verdict is the status a request with query to host must get.
type verdict struct {
	host, query string
	status      int
}

// expectVerdicts sends each request until all get their status several
// times in a row: the proxy picks up rule set changes at its next poll.
// An admitted request must carry the upstream's answer.
func expectVerdicts(t testing.TB, proxy, what string, vs []verdict) {
	t.Helper()
	hc := &http.Client{Timeout: 10 * time.Second}
	consistently(t, what, 5, func() (bool, string) {
		for _, v := range vs {
			req, err := http.NewRequest(http.MethodGet, "http://"+proxy+"/?"+v.query, nil)
			if err != nil {
				return false, err.Error()
			}
			req.Host = v.host
			resp, err := hc.Do(req)
			if err != nil {
				return false, fmt.Sprintf("%s ?%s: %v", v.host, v.query, err)
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode != v.status {
				return false, fmt.Sprintf("%s ?%s: %d %q, want %d", v.host, v.query, resp.StatusCode, body, v.status)
			}
			if v.status == http.StatusOK && !strings.HasPrefix(string(body), "hello from edge-gw-") {
				return false, fmt.Sprintf("%s ?%s: admitted with body %q, not the Gateway's", v.host, v.query, body)
			}
		}
		return true, ""
	})
}

func (e *env) patchPolicyTarget(t testing.TB, ns, policy, route string) {
	t.Helper()
	p := &wafv1alpha1.WAFGatewayBindingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: policy}}
	devtest.Update(t, e.c, p, func() { p.Spec.TargetRefs[0].Name = gatewayv1.ObjectName(route) })
}

// uninstallWAF deletes the test's Engines while Portal still runs (it
// removes the NetworkPolicy it wrote into its own namespace) and then
// uninstalls the chart, so the package's next test starts clean.
func (e *env) uninstallWAF(t testing.TB, ns string) {
	t.Helper()
	ctx := context.Background()
	if err := e.c.DeleteAllOf(ctx, &wafv1alpha1.Engine{}, client.InNamespace(ns)); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete the Engines of %s: %v", ns, err)
	}
	eventually(t, 2*time.Minute, "the Engines of "+ns+" gone", func(ctx context.Context) (bool, error) {
		var l wafv1alpha1.EngineList
		return e.c.List(ctx, &l, client.InNamespace(ns)) == nil && len(l.Items) == 0, nil
	})
	e.helm(t, "uninstall", releaseName, "--namespace", releaseNS, "--wait", "--timeout", "4m")
	eventually(t, 2*time.Minute, "Portal's pods to be gone", func(ctx context.Context) (bool, error) {
		pods, err := e.cs.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	})
}

// dumpWAF logs the Engine, the RuleSets and the pods of ns with their
// logs and events, and the logs of Portal's pods, while they still exist.
func (e *env) dumpWAF(t testing.TB, ns string) {
	ctx := context.Background()
	var engs wafv1alpha1.EngineList
	if err := e.c.List(ctx, &engs, client.InNamespace(ns)); err == nil {
		for _, en := range engs.Items {
			t.Logf("Engine %s: %+v", en.Name, en.Status.Conditions)
		}
	}
	var rss wafv1alpha1.RuleSetList
	if err := e.c.List(ctx, &rss, client.InNamespace(ns)); err == nil {
		for _, rs := range rss.Items {
			t.Logf("RuleSet %s: %+v", rs.Name, rs.Status.Conditions)
		}
	}
	for _, n := range []string{ns, releaseNS} {
		pods, _ := e.cs.CoreV1().Pods(n).List(ctx, metav1.ListOptions{})
		for _, p := range pods.Items {
			t.Logf("pod %s/%s: %s %+v", n, p.Name, p.Status.Phase, p.Status.ContainerStatuses)
			logs, err := e.cs.CoreV1().Pods(n).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr.To[int64](40)}).DoRaw(ctx)
			t.Logf("logs of %s (err %v):\n%s", p.Name, err, logs)
		}
	}
	evs, _ := e.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	for _, ev := range evs.Items {
		t.Logf("event %s %s %s: %s", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
	}
}
