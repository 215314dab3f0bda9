package manager

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/testlog"
)

// verdictRules deny a pod labelled bad=yes, and label and evict it; and
// warn about a pod labelled sentinel=yes until it is annotated, which
// annotates it. The sentinel's action runs on the same worker as every
// earlier action on that pod, so once it has run those have too.
var verdictRules = map[string]string{
	"deny-bad.yaml": `name: verdicts-deny-bad
severity: high
mode: [admission]
enforcementAction: deny
match: {gvk: [{kind: Pod}], namespaces: {include: [verdicts-victim, verdicts-tenant]}}
rule: object.metadata.labels?.bad == "yes"
message: bad pod
actions:
  - {type: label, key: portal.io/flagged, value: "true"}
  - {type: evict}
`,
	"sentinel.yaml": `name: verdicts-sentinel
severity: low
mode: [admission]
enforcementAction: warn
match: {gvk: [{kind: Pod}], namespaces: {include: [verdicts-victim, verdicts-tenant]}}
rule: object.metadata.labels?.sentinel == "yes" && !("portal.io/seen" in (object.metadata.annotations ?? {}))
message: sentinel
actions:
  - {type: annotate, key: portal.io/seen, value: "yes"}
`,
}

// labelBad is the UPDATE the deny rule refuses. A merge patch rather than
// an Update: it carries no resourceVersion, so a write to the pod by anyone
// else in the shared API server between create and update cannot turn the
// refusal into a conflict.
var labelBad = client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"bad":"yes"}}}`))

// verdictEnv is a running Portal with admission and actions, and what the
// test reads of it.
type verdictEnv struct {
	t    *testing.T
	c    client.Client
	logs *testlog.Buffer
	port int
	// cert is the client certificate forge presents; nil: none.
	cert *tls.Certificate
}

// TestAdmissionVerdictsOnlyActOnTheReviewedObject runs admission and the
// actions together against a real API server. A dry-run request, a review
// forged straight to the webhook port by a tenant naming a pod in another
// namespace, and a refused CREATE reusing a live pod's name all leave the
// live pod alone; a refused UPDATE of a live pod, and a warned CREATE, act
// on it.
func TestAdmissionVerdictsOnlyActOnTheReviewedObject(t *testing.T) {
	ctx := context.Background()
	e := startVerdictPortal(t)
	const victims = "verdicts-victim"

	// kubectl --dry-run=server by someone who may only patch pods: the
	// API server sends the live pod's UID, yet nothing was changed.
	dry := e.pod(victims, "dry-run", nil)
	if err := e.c.Patch(ctx, dry.DeepCopy(), labelBad, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "bad pod") {
		t.Fatalf("dry-run update: %v, want denied", err)
	}
	e.untouched(dry)

	// A review a tenant's pod posts to the webhook port, naming a pod in
	// another namespace: with a made-up UID, and with none.
	forged := e.pod(victims, "forged", nil)
	for i, uid := range []string{"6b1f3c52-0000-4000-8000-000000000000", ""} {
		if resp := e.forge(fmt.Sprint("forged-", i), victims, "forged", uid); resp.Allowed {
			t.Fatalf("forged review admitted: %+v", resp)
		}
	}
	e.untouched(forged)
	e.skipped("forged", 2)

	// A refused CREATE that reuses a live pod's name: the API server calls
	// the webhook before it finds the name taken, with a new UID.
	taken := e.pod(victims, "taken", nil)
	twin := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: victims, Name: "taken", Labels: map[string]string{"bad": "yes"}},
		Spec: taken.Spec}
	if err := e.c.Create(ctx, twin); err == nil || !strings.Contains(err.Error(), "bad pod") {
		t.Fatalf("create reusing a live pod's name: %v, want denied", err)
	}
	e.untouched(taken)
	e.skipped("taken", 1)

	// A refused UPDATE of a live pod is about that pod: it is labelled and
	// evicted.
	offender := e.pod("verdicts-tenant", "offender", nil)
	if err := e.c.Patch(ctx, offender.DeepCopy(), labelBad); err == nil || !strings.Contains(err.Error(), "bad pod") {
		t.Fatalf("update: %v, want denied", err)
	}
	e.poll("the offender evicted", func() bool {
		return apierrors.IsNotFound(e.c.Get(ctx, client.ObjectKeyFromObject(offender), &corev1.Pod{}))
	})
	if got := e.results("label", "offender"); got != "success" {
		t.Errorf("label on the offender: %s, want success", got)
	}
	// A warned CREATE is about the pod it creates: the API server sets its
	// UID before it calls the webhook, and stores the pod with it. (The
	// action may run before the pod is stored, and then finds it gone:
	// only the UID is asserted.)
	newcomer := e.pod("verdicts-tenant", "newcomer", map[string]string{"sentinel": "yes"})
	e.poll("the annotate attempt on the newcomer", func() bool { return len(e.lines("annotate", "newcomer")) > 0 })
	if got := e.lines("annotate", "newcomer")[0]["uid"]; got != string(newcomer.UID) {
		t.Errorf("the warned CREATE's verdict names UID %v, the stored pod has %s", got, newcomer.UID)
	}
}

func startVerdictPortal(t *testing.T) *verdictEnv {
	ctx := context.Background()
	cl := shared.Cluster(t)
	c := clusterClient(t, cl, "verdicts-portal", "verdicts-victim", "verdicts-tenant")
	cfg, _, port := layerConfig(t, "verdicts")
	cfg.Namespace = "verdicts-portal"
	cfg.Admission.Enabled = true
	cfg.Actions.Enabled = true
	cfg.Actions.Types = []string{"label", "annotate", "evict"}
	cfg.RulesFolder = t.TempDir()
	for name, body := range verdictRules {
		if err := os.WriteFile(filepath.Join(cfg.RulesFolder, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	logs := &testlog.Buffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	// Registered first, so it runs once Portal has stopped: a fail-closed
	// webhook for pods left behind would refuse the next tests' pods.
	t.Cleanup(func() {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: cfg.Admission.ConfigName}}
		if err := c.Delete(context.Background(), vwc); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
	runUntilReady(t, cl, cfg)
	e := &verdictEnv{t: t, c: c, logs: logs, port: port}
	e.poll("the webhook deciding pods", func() bool {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "verdicts-tenant", Name: "probe", Labels: map[string]string{"bad": "yes"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
		err := c.Create(ctx, p, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "bad pod")
	})
	return e
}

func (e *verdictEnv) poll(what string, cond func() bool) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		e.t.Fatalf("waiting for %s: %v\n%s", what, err, e.logs.String())
	}
}

func (e *verdictEnv) pod(ns, name string, labels map[string]string) *corev1.Pod {
	e.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
	if err := e.c.Create(context.Background(), p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// forge posts a review of an UPDATE that labels ns/name bad=yes straight
// to the webhook port, as any pod can without client certificates (with
// e.cert, as the API server would with one).
func (e *verdictEnv) forge(reqUID, ns, name, uid string) *admissionv1.AdmissionResponse {
	e.t.Helper()
	meta := map[string]any{"name": name, "namespace": ns, "labels": map[string]any{"bad": "yes"}}
	if uid != "" {
		meta["uid"] = uid
	}
	pod := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta,
		"spec": map[string]any{"containers": []any{map[string]any{"name": "app", "image": "registry.example/app:1"}}}}
	review := map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": map[string]any{
		"uid": reqUID, "kind": map[string]any{"version": "v1", "kind": "Pod"}, "resource": map[string]any{"version": "v1", "resource": "pods"},
		"name": name, "namespace": ns, "operation": "UPDATE", "userInfo": map[string]any{"username": "system:serviceaccount:verdicts-tenant:default"},
		"object": pod, "oldObject": pod,
	}}
	body, err := json.Marshal(review)
	if err != nil {
		e.t.Fatal(err)
	}
	tc := &tls.Config{InsecureSkipVerify: true}
	if e.cert != nil {
		tc.Certificates = []tls.Certificate{*e.cert}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	resp, err := hc.Post(fmt.Sprintf("https://127.0.0.1:%d/validate", e.port), "application/json", strings.NewReader(string(body)))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil {
		e.t.Fatalf("forged review: HTTP %d: %v", resp.StatusCode, err)
	}
	return out.Response
}

// untouched touches the live pod p genuinely (sentinel=yes), waits until
// Portal has acted on that, and so on every verdict about p offered before,
// then fails unless the pod is still there, not labelled by the deny rule.
func (e *verdictEnv) untouched(p *corev1.Pod) {
	e.t.Helper()
	ctx := context.Background()
	live := &corev1.Pod{}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(p), live); err != nil {
		e.t.Fatalf("the live pod %s is gone: %v", p.Name, err)
	}
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"sentinel":"yes"}}}`))
	if err := e.c.Patch(ctx, live, patch); err != nil {
		e.t.Fatal(err)
	}
	e.poll("the sentinel's annotate attempt on "+p.Name, func() bool { return e.results("annotate", p.Name) != "" })
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(p), live); err != nil {
		e.t.Fatalf("the live pod %s was evicted for a verdict about another object: %v", p.Name, err)
	}
	if live.UID != p.UID || live.Labels["portal.io/flagged"] != "" {
		e.t.Fatalf("the live pod %s was changed for a verdict about another object: uid %s, labels %v", p.Name, live.UID, live.Labels)
	}
	if got := e.results("label", p.Name) + e.results("evict", p.Name); strings.Contains(got, "success") {
		e.t.Fatalf("actions on %s: %s", p.Name, got)
	}
}

// skipped fails unless label and evict each recorded n attempts on the
// named pod, all skipped as not about the live pod.
func (e *verdictEnv) skipped(name string, n int) {
	e.t.Helper()
	for _, action := range []string{"label", "evict"} {
		want := strings.TrimSuffix(strings.Repeat("skipped,", n), ",")
		if got := e.results(action, name); got != want {
			e.t.Errorf("%s on %s: results %q, want %q", action, name, got, want)
		}
	}
}

// lines returns the action's audit lines on the named object, in order.
func (e *verdictEnv) lines(action, name string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(e.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["audit"] == "action" && m["action"] == action && m["name"] == name {
			out = append(out, m)
		}
	}
	return out
}

// results lists the results of the action's audit lines on the named
// object, in order.
func (e *verdictEnv) results(action, name string) string {
	var rs []string
	for _, m := range e.lines(action, name) {
		rs = append(rs, fmt.Sprint(m["result"]))
	}
	return strings.Join(rs, ",")
}
