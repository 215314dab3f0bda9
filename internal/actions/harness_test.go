package actions_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/findings"
	"github.com/vilaca/portal/internal/testlog"
)

// lockedBuffer collects the JSON log lines of one engine.
type lockedBuffer struct{ testlog.Buffer }

// auditLines returns the action audit lines, decoded.
func (b *lockedBuffer) auditLines() []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["audit"] == "action" {
			out = append(out, m)
		}
	}
	return out
}

// lines returns the audit lines of one action on one object name.
func (b *lockedBuffer) lines(action, name string) []map[string]any {
	var out []map[string]any
	for _, m := range b.auditLines() {
		if m["action"] == action && m["name"] == name {
			out = append(out, m)
		}
	}
	return out
}

// env is one engine fed by a real findings pipeline, against the shared
// control plane.
type env struct {
	t     testing.TB
	c     client.Client
	eng   *actions.Engine
	audit *findings.Producer
	log   *lockedBuffer
	reg   *prometheus.Registry
}

// start runs a manager with a findings pipeline whose only sink is the
// engine, and an "audit" producer the test publishes into.
func start(t testing.TB, mutate func(*actions.Options)) *env {
	t.Helper()
	return startWith(t, mutate, true)
}

// startWith runs the engine with or without the pipeline in front (without
// it, the test calls Publish itself and sees every state, uncoalesced).
func startWith(t testing.TB, mutate func(*actions.Options), pipeline bool) *env {
	t.Helper()
	cl := shared.Cluster(t)
	mgr, err := devtest.NewManager(cl, clientgoscheme.Scheme)
	if err != nil {
		t.Fatal(err)
	}
	policy, err := actions.NewPolicyClient(cl.Config)
	if err != nil {
		t.Fatal(err)
	}
	buf := &lockedBuffer{}
	log := slog.New(slog.NewJSONHandler(buf, nil))
	reg := prometheus.NewRegistry()
	o := actions.Options{
		Env:     actions.Env{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Policy: policy},
		Enabled: actions.Types(), Namespace: "portal-system", Protected: []string{"kube-system"},
		Recorder: mgr.GetEventRecorder("portal-actions"), Logger: log, Registerer: reg,
	}
	if mutate != nil {
		mutate(&o)
	}
	eng, err := actions.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(eng); err != nil {
		t.Fatal(err)
	}
	var pr *findings.Producer
	if pipeline {
		p, err := findings.New(mgr, findings.Options{Sinks: []core.OutputSink{eng}, Logger: log, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		if pr, err = p.Register("audit", findings.ProducerOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stop := devtest.Run(mgr)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	c, err := client.New(cl.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, c: c, eng: eng, audit: pr, log: buf, reg: reg}
}

// namespace creates a namespace for one test.
func (e *env) namespace(name string) string {
	e.t.Helper()
	if err := e.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		e.t.Fatal(err)
	}
	return name
}

// pod creates a pod without a node: it exists as an object, which is all the
// Eviction API needs.
func (e *env) pod(ns, name string, labels map[string]string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	e.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	for _, m := range mutate {
		m(p)
	}
	if err := e.c.Create(context.Background(), p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func podRef(p *corev1.Pod) core.ResourceRef {
	return core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
}

// open publishes a failing finding of r on ref; clear publishes none.
func (e *env) open(r *core.Rule, ref core.ResourceRef) {
	e.audit.Set(ref, []core.Finding{{Result: core.Result{Rule: r, Resource: ref, Outcome: core.OutcomeFail, Message: "violation"}}}, time.Now())
}

func (e *env) clear(ref core.ResourceRef) { e.audit.Set(ref, nil, time.Now()) }

// count is portal_actions_total{action,result}.
func (e *env) count(action, result string) float64 {
	return testutil.ToFloat64(e.eng.Metrics().Actions.WithLabelValues(action, result))
}

// clusterRule is a PortalClusterRule with the given actions.
func clusterRule(name string, as ...core.ActionSpec) *core.Rule {
	return &core.Rule{Name: name, Enabled: true, Severity: core.SeverityHigh, Modes: []core.Mode{core.ModeAudit},
		Actions: as, Source: core.Source{Kind: "PortalClusterRule", Name: name}}
}

// nsRule is a PortalRule in ns with the given actions.
func nsRule(ns, name string, as ...core.ActionSpec) *core.Rule {
	r := clusterRule(name, as...)
	r.Namespace = ns
	r.Source = core.Source{Kind: "PortalRule", Namespace: ns, Name: name}
	return r
}

func spec(typ string, kv ...string) core.ActionSpec {
	a := core.ActionSpec{Type: typ, Params: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		a.Params[kv[i]] = kv[i+1]
	}
	return a
}

func results(lines []map[string]any) string {
	var rs []string
	for _, l := range lines {
		rs = append(rs, fmt.Sprint(l["result"]))
	}
	return strings.Join(rs, ",")
}

func dump(t testing.TB, e *env) {
	for _, l := range e.log.auditLines() {
		t.Log(l)
	}
}

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

func gaugeOf(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }
