package chart

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	reportsv1alpha2 "github.com/vilaca/portal/api/reports/v1alpha2"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/manager"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/migrate"
	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.json from what this run observes")

// goldenBundle is the example rule bundle the golden test installs as a
// user would: `portal migrate-rules PATH... | kubectl apply -f -`. The Pod
// Security Standards deny; two best-practice rules warn.
var goldenBundle = []string{
	"examples/rules/pod-security",
	"examples/rules/best-practices/require-app-name-label.yaml",
	"examples/rules/best-practices/disallow-latest-tag.yaml",
}

// TestGolden is the seed's golden end-to-end test: the chart with audit
// and a real Alertmanager, workloads that exist before any rule
// (testdata/golden/existing.yaml), the example bundle, then a fixture of
// compliant, warned and violating manifests (testdata/golden/manifests.yaml)
// created one by one. What a user sees is compared with the golden files
// in testdata/golden: what admission answered each create
// (admission.json), the PolicyReport (policyreport.json), the alerts in
// Alertmanager (alerts.json) and Portal's Prometheus series (metrics.json).
// `go test -run TestGolden -update` rewrites them; review the diff by hand,
// they are the specification.
func TestGolden(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// Pods reach the host at the node's bridge address.
	am := amtest.StartWith(t, amtest.Options{Host: devcluster.NodeIP})
	e.install(t, "audit.enabled=true", "audit.alertmanagerURL="+am.URL())
	t.Cleanup(func() {
		e.helm(t, "uninstall", releaseName, "--namespace", releaseNS, "--wait", "--timeout", "4m")
	})
	// The dev node's bridge CNI enforces no NetworkPolicy: check that the
	// chart's would let Portal reach Alertmanager in a cluster that does.
	nps, err := e.cs.NetworkingV1().NetworkPolicies(releaseNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, np := range nps.Items {
		if slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			t.Fatalf("the chart's NetworkPolicy %s restricts egress: Portal may not reach Alertmanager (egress %v)", np.Name, np.Spec.Egress)
		}
	}
	g := &golden{e: e, ns: e.workload, dir: filepath.Join("testdata", "golden")}

	for _, d := range g.docs(t, "existing.yaml") {
		if r := g.create(ctx, t, d); r.Result != "admitted" {
			t.Fatalf("creating %s/%s before any rule: %+v", r.Kind, r.Name, r)
		}
	}
	n := g.applyBundle(t, root)
	g.waitEnforcing(t, n)

	before := g.metrics(t)
	var admission goldenAdmission
	admission.Counts = map[string]int{}
	for _, d := range g.docs(t, "manifests.yaml") {
		r := g.create(ctx, t, d)
		admission.Counts[r.Result]++
		admission.Objects = append(admission.Objects, r)
	}
	g.check(t, "admission.json", func() (any, error) { return admission, nil })
	g.check(t, "policyreport.json", func() (any, error) { return g.report(ctx) })
	g.check(t, "alerts.json", func() (any, error) { return g.alerts(am) })
	g.check(t, "metrics.json", func() (any, error) { return g.metricsSince(t, before), nil })
	// The example bundle with the chart's default watchedGvks: every kind
	// its rules match must be granted, or audit logs forbidden errors.
	e.assertNoForbidden(t)
}

// golden is the state of TestGolden.
type golden struct {
	e   *env
	ns  string
	dir string
}

func (g *golden) docs(t *testing.T, file string) []manifest.Document {
	t.Helper()
	docs, err := manifest.ReadPaths([]string{filepath.Join(g.dir, file)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// admissionResult is what admission answered the create of one object.
type admissionResult struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Result string `json:"result"` // admitted, warned or denied
	// Messages are the warnings, or the reason of the denial.
	Messages []string `json:"messages,omitempty"`
}

type goldenAdmission struct {
	Counts  map[string]int    `json:"counts"`
	Objects []admissionResult `json:"objects"`
}

// create creates one fixture object in the test's namespace, as kubectl
// create would, and says what admission answered.
func (g *golden) create(ctx context.Context, t *testing.T, d manifest.Document) admissionResult {
	t.Helper()
	var u unstructured.Unstructured
	if err := yaml.Unmarshal(d.Data, &u.Object); err != nil {
		t.Fatal(d.Errorf("%v", err))
	}
	u.SetNamespace(g.ns)
	g.e.takeWarnings()
	err := g.e.c.Create(ctx, &u)
	r := admissionResult{Kind: u.GetKind(), Name: u.GetName()}
	switch w := g.e.takeWarnings(); {
	case apierrors.IsForbidden(err):
		r.Result, r.Messages = "denied", []string{g.normalise(err.Error())}
	case err != nil:
		t.Fatalf("create %s %s: %v (not a decision of Portal's)", r.Kind, r.Name, err)
	case len(w) > 0:
		r.Result = "warned"
		for _, s := range w {
			r.Messages = append(r.Messages, g.normalise(s))
		}
	default:
		r.Result = "admitted"
	}
	return r
}

// normalise replaces the test's namespace, which changes every run.
func (g *golden) normalise(s string) string {
	return strings.ReplaceAll(s, g.ns, "NAMESPACE")
}

// applyBundle installs goldenBundle the way the docs tell a user to and
// returns the number of rules.
func (g *golden) applyBundle(t *testing.T, root string) int {
	t.Helper()
	var out bytes.Buffer
	for _, p := range goldenBundle {
		files, err := manifest.Files(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			cr, err := migrate.Migrate(f, data, migrate.FormatCR)
			if err != nil {
				t.Fatal(err)
			}
			out.WriteString("---\n")
			out.Write(cr)
		}
	}
	cmd := exec.Command(filepath.Join(g.e.cl.BinaryDir(), "kubectl"), "--kubeconfig", g.e.kubeconfig, "apply", "-f", "-")
	cmd.Stdin = bytes.NewReader(out.Bytes())
	res, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply the bundle: %v\n%s", err, res)
	}
	// The package's later tests install Portal again: the bundle must not
	// outlive this one (the CRDs, and so the rules, survive an uninstall).
	t.Cleanup(func() {
		cmd := exec.Command(filepath.Join(g.e.cl.BinaryDir(), "kubectl"), "--kubeconfig", g.e.kubeconfig, "delete", "--ignore-not-found", "--wait", "-f", "-")
		cmd.Stdin = bytes.NewReader(out.Bytes())
		if res, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("kubectl delete the bundle: %v\n%s", err, res)
		}
	})
	return len(migrate.ObjectNames(out.Bytes()))
}

// waitEnforcing waits until every replica loaded the n rules and the API
// server sends Portal the creates of every kind the fixture has.
func (g *golden) waitEnforcing(t *testing.T, n int) {
	t.Helper()
	eventually(t, 2*time.Minute, fmt.Sprintf("%d rules loaded by every replica", n), func(context.Context) (bool, error) {
		pods := g.e.portalPods(t)
		loaded := g.e.scrapeSeries(t, `portal_rules_loaded{source="cr"}`)
		for _, p := range pods {
			if loaded[p.Name] != float64(n) {
				return false, nil
			}
		}
		return len(pods) == 2, nil
	})
	eventually(t, time.Minute, "the webhook configuration to cover Pods, Deployments and ReplicaSets", func(ctx context.Context) (bool, error) {
		vwc, err := g.e.cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, releaseName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		covered := map[string]bool{}
		for _, w := range vwc.Webhooks {
			for _, r := range w.Rules {
				for _, res := range r.Resources {
					covered[res] = true
				}
			}
		}
		return covered["pods"] && covered["deployments"] && covered["replicasets"], nil
	})
	consistently(t, "a privileged pod denied by both replicas", 10, func() (bool, string) {
		err := g.e.createDry(g.ns, testPod("probe", map[string]string{"app.kubernetes.io/name": "probe"}, true))
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "PSS baseline (privileged)"), fmt.Sprint(err)
	})
}

// reportResult is the stable part of a PolicyReport result.
type reportResult struct {
	Source    string `json:"source"`
	Policy    string `json:"policy"`
	Rule      string `json:"rule"`
	Category  string `json:"category"`
	Result    string `json:"result"`
	Severity  string `json:"severity"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Container string `json:"container,omitempty"`
	Message   string `json:"message"`
}

type goldenReport struct {
	Summary reportsv1alpha2.PolicyReportSummary `json:"summary"`
	Results []reportResult                      `json:"results"`
}

// report reads Portal's PolicyReports of the test's namespace.
func (g *golden) report(ctx context.Context) (any, error) {
	scheme, err := manager.Scheme()
	if err != nil {
		return nil, err
	}
	if err := reportsv1alpha2.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(g.e.cl.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	var list reportsv1alpha2.PolicyReportList
	if err := c.List(ctx, &list, client.InNamespace(g.ns), client.MatchingLabels{"app.kubernetes.io/managed-by": "portal"}); err != nil {
		return nil, err
	}
	names, err := g.podNames(ctx)
	if err != nil {
		return nil, err
	}
	var out goldenReport
	for _, r := range list.Items {
		s := r.Summary
		out.Summary.Pass += s.Pass
		out.Summary.Fail += s.Fail
		out.Summary.Warn += s.Warn
		out.Summary.Error += s.Error
		out.Summary.Skip += s.Skip
		for _, res := range r.Results {
			rr := reportResult{
				Source: res.Source, Policy: res.Policy, Rule: res.Rule, Category: res.Category, Result: string(res.Result),
				Severity: string(res.Severity), Container: res.Properties["container"], Message: g.normalise(res.Message),
			}
			if len(res.Resources) > 0 {
				rr.Kind, rr.Name = res.Resources[0].Kind, names.of(res.Resources[0].Kind, res.Resources[0].Name)
			}
			out.Results = append(out.Results, rr)
		}
	}
	slices.SortFunc(out.Results, func(a, b reportResult) int {
		return strings.Compare(a.Kind+"/"+a.Name+"/"+a.Policy+"/"+a.Container+"/"+a.Source, b.Kind+"/"+b.Name+"/"+b.Policy+"/"+b.Container+"/"+b.Source)
	})
	return out, nil
}

// generatedNames maps the names of pods their ReplicaSet named (random
// suffixes) to their generateName and "*".
type generatedNames map[string]string

func (n generatedNames) of(kind, name string) string {
	if kind == "Pod" && n[name] != "" {
		return n[name]
	}
	return name
}

func (g *golden) podNames(ctx context.Context) (generatedNames, error) {
	pods, err := g.e.cs.CoreV1().Pods(g.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := generatedNames{}
	for _, p := range pods.Items {
		if p.GenerateName != "" {
			out[p.Name] = p.GenerateName + "*"
		}
	}
	return out, nil
}

// goldenAlert is an alert as Alertmanager holds it.
type goldenAlert struct {
	Labels  map[string]string `json:"labels"`
	Message string            `json:"message"`
	State   string            `json:"state"`
}

// alerts reads the alerts of the test's namespace from Alertmanager's
// API v2.
func (g *golden) alerts(am *amtest.Server) (any, error) {
	as, err := am.Alerts(g.ns)
	if err != nil {
		return nil, err
	}
	names, err := g.podNames(context.Background())
	if err != nil {
		return nil, err
	}
	out := make([]goldenAlert, 0, len(as))
	for _, a := range as {
		labels := map[string]string{}
		for k, v := range a.Labels {
			labels[k] = g.normalise(v)
		}
		labels["name"] = names.of(labels["kind"], labels["name"])
		out = append(out, goldenAlert{Labels: labels, Message: g.normalise(a.Annotations["message"]), State: a.Status.State})
	}
	key := func(a goldenAlert) string {
		return a.Labels["kind"] + "/" + a.Labels["name"] + "/" + a.Labels["rule"] + "/" + a.Labels["container"] + "/" + a.Labels["producer"]
	}
	slices.SortFunc(out, func(a, b goldenAlert) int { return strings.Compare(key(a), key(b)) })
	return out, nil
}

// goldenMetricPrefixes are the series of Portal's pods the golden test
// records: admission, audit and what audit feeds.
var goldenMetricPrefixes = []string{"portal_admission_", "portal_audit_", "portal_rules_", "portal_policyreport_", "portal_alertmanager_", "portal_findings_"}

// goldenMetricValues are the series whose values the run decides: a
// counter as its change over the fixture, summed over the replicas (the
// Service picks one per request); anything else as each replica's value,
// sorted (the leader's and the follower's). Every other series is recorded
// without its value.
var goldenMetricValues = map[string]bool{
	"portal_admission_requests_total":          true,
	"portal_admission_dryrun_violations_total": true,
	"portal_admission_rule_errors_total":       true,
	"portal_admission_malformed_total":         true,
	"portal_admission_bypass_total":            true,
	"portal_audit_violations":                  true,
	"portal_audit_rule_errors_total":           true,
	"portal_audit_sink_errors_total":           true,
	"portal_audit_leader":                      true,
	"portal_rules_loaded":                      true,
	"portal_rule_load_errors_total":            true,
	"portal_alertmanager_alerts_dropped_total": true,
	"portal_alertmanager_alerts_refused_total": true,
	"portal_policyreport_write_errors_total":   true,
}

// metrics returns every recorded series of each replica.
func (g *golden) metrics(t *testing.T) map[string][]float64 {
	t.Helper()
	out := map[string][]float64{}
	for _, byPod := range g.e.scrapeAll(t, goldenMetricPrefixes) {
		for series, v := range byPod {
			out[series] = append(out[series], v)
		}
	}
	return out
}

// metricsSince is the golden form of the series (see goldenMetricValues),
// with before the series when the fixture started.
func (g *golden) metricsSince(t *testing.T, before map[string][]float64) map[string]any {
	out := map[string]any{}
	for series, vs := range g.metrics(t) {
		name, _, _ := strings.Cut(series, "{")
		if strings.HasSuffix(name, "_bucket") {
			continue
		}
		key := g.normalise(series)
		switch {
		case !goldenMetricValues[name]:
			out[key] = nil
		case strings.HasSuffix(name, "_total"):
			var sum float64
			for _, v := range vs {
				sum += v
			}
			for _, v := range before[series] {
				sum -= v
			}
			out[key] = sum
		default:
			slices.Sort(vs)
			out[key] = vs
		}
	}
	return out
}

// check compares what get returns with the golden file, waiting for them to
// agree (audit, reports and alerts follow the creates). With -update it
// waits for get to settle instead and writes the file.
func (g *golden) check(t *testing.T, file string, get func() (any, error)) {
	t.Helper()
	path := filepath.Join(g.dir, file)
	encode := func() ([]byte, error) {
		v, err := get()
		if err != nil {
			return nil, err
		}
		b, err := json.MarshalIndent(v, "", "  ")
		return append(b, '\n'), err
	}
	var got []byte
	if *update {
		// Settled: the same for 5 s in a row.
		var since time.Time
		err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
			b, err := encode()
			if err != nil {
				return false, nil
			}
			if !bytes.Equal(b, got) {
				got, since = b, time.Now()
			}
			return time.Since(since) >= 5*time.Second, nil
		})
		if err != nil {
			t.Fatalf("%s did not settle: %v", file, err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	var lastErr error
	err = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		got, lastErr = encode()
		return lastErr == nil && bytes.Equal(got, want), nil
	})
	if err != nil {
		t.Errorf("%s: what the cluster shows differs from the golden file (last error %v); `go test -run TestGolden -update` rewrites it, review the diff.\ngot:\n%s\nwant:\n%s", path, lastErr, got, want)
	}
}

// scrapeAll reads the series of every Portal pod whose names start with one
// of prefixes, by pod: "name{labels}" to value.
func (e *env) scrapeAll(t testing.TB, prefixes []string) map[string]map[string]float64 {
	t.Helper()
	out := map[string]map[string]float64{}
	for _, p := range e.portalPods(t) {
		if p.Status.PodIP == "" {
			continue
		}
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + net.JoinHostPort(p.Status.PodIP, "8443") + "/metrics")
		if err != nil {
			t.Fatalf("metrics of %s: %v", p.Name, err)
		}
		series := map[string]float64{}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(line, p) }) {
				continue
			}
			i := strings.LastIndexByte(line, ' ')
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if i < 0 || err != nil {
				t.Fatalf("metrics of %s: %q: %v", p.Name, line, err)
			}
			series[line[:i]] = v
		}
		resp.Body.Close()
		out[p.Name] = series
	}
	return out
}

// scrapeSeries reads one series ("name{labels}") from every Portal pod.
func (e *env) scrapeSeries(t testing.TB, series string) map[string]float64 {
	t.Helper()
	name, _, _ := strings.Cut(series, "{")
	out := map[string]float64{}
	for pod, s := range e.scrapeAll(t, []string{name}) {
		if v, ok := s[series]; ok {
			out[pod] = v
		}
	}
	return out
}
