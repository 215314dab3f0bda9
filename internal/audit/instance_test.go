package audit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"

	reportsv1alpha2 "github.com/vilaca/portal/api/reports/v1alpha2"
	"github.com/vilaca/portal/internal/audit"
	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/findings"
	"github.com/vilaca/portal/internal/rule"
	"github.com/vilaca/portal/internal/sink"
	amsink "github.com/vilaca/portal/internal/sink/alertmanager"
	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
	"github.com/vilaca/portal/internal/sink/policyreport"
	promsink "github.com/vilaca/portal/internal/sink/prometheus"
	"github.com/vilaca/portal/internal/sink/stdout"
)

// instance is one Portal audit layer with its sinks, as `portal run --audit`
// assembles it, on its own manager and metrics registry.
type instance struct {
	reg    *prometheus.Registry
	layer  *audit.Layer
	engine *engine.Engine
	counts *rule.StatusCounts
	cache  *clustercache.Cache
	cancel context.CancelFunc
	done   chan error
	once   sync.Once

	// producer is the second producer of the instance's findings pipeline,
	// when instanceOptions.producer names one.
	producer *findings.Producer
}

type instanceOptions struct {
	// rules is a YAML rule file loaded as a folder would.
	rules string
	// crRules loads rules from PortalRule/PortalClusterRule objects and
	// writes their counts.
	crRules bool
	am      *amtest.Server
	// leaderID turns on leader election with this Lease name.
	leaderID   string
	restConfig *rest.Config
	// resync overrides the one-hour resync period of the tests.
	resync    time.Duration
	amOptions func(*amsink.Options)
	// formats are the report formats; default wgpolicyk8s.
	formats []string
	// sharedCache gives audit a cluster cache built outside it, as the
	// manager does, in instance.cache.
	sharedCache bool
	// limits, workers and evalTimeout override the evaluation budget, the
	// worker count and the per-object deadline.
	limits      exprlang.Limits
	workers     int
	evalTimeout time.Duration
	// producer registers a second producer of this name in the pipeline
	// audit publishes into, as another layer would.
	producer string
	// gone is audit.Options.Gone.
	gone func(gvk schema.GroupVersionKind, namespace, name string)
	// counter is audit.Options.RuleCounter, when crRules does not set it.
	counter audit.RuleCounter
	// reportName names the instance's reports (policyreport.Options.Name).
	reportName string
	// ownerNode builds the report sinks as `portal run --report-name
	// reportName --report-owner-node ownerNode` does, through the sink
	// registry: the Node owns the reports.
	ownerNode string
}

func startInstance(t *testing.T, o instanceOptions) *instance {
	t.Helper()
	cluster(t)
	log := testLogger()
	opts := mgrOptions(o.leaderID)
	opts.Controller = config.Controller{SkipNameValidation: ptr.To(true)}
	mgr, err := ctrl.NewManager(env.cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(exprlang.New(exprlang.WithLimits(o.limits)))
	if o.rules != "" {
		rules, errs := rule.CompileFile(eng, "test-rules.yaml", []byte(o.rules))
		if len(errs) > 0 {
			t.Fatalf("rules: %v", errs)
		}
		eng.SetRules(rules)
	}
	reg := prometheus.NewRegistry()
	sinks := []core.OutputSink{promsink.New(reg), stdout.New(log)}
	formats := o.formats
	if formats == nil {
		formats = []string{policyreport.FormatWGPolicy}
	}
	if o.ownerNode != "" {
		sinks = append(sinks, registrySinks(t, mgr, log, reg, "--report-name="+o.reportName, "--report-owner-node="+o.ownerNode)...)
		formats = nil
	}
	for _, f := range formats {
		pr, err := policyreport.New(policyreport.Options{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Format: f, Logger: log, Registerer: reg, Name: o.reportName})
		if err != nil {
			t.Fatal(err)
		}
		sinks = append(sinks, pr)
	}
	if o.am != nil {
		ao := amsink.Options{URL: o.am.URL(), MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, Logger: log, Registerer: reg}
		if o.amOptions != nil {
			o.amOptions(&ao)
		}
		s, err := amsink.New(ao)
		if err != nil {
			t.Fatal(err)
		}
		sinks = append(sinks, s)
	}
	inst := &instance{reg: reg, engine: eng, done: make(chan error, 1)}
	resync := time.Hour
	if o.resync > 0 {
		resync = o.resync
	}
	ao := audit.Options{
		Sinks: sinks, Logger: log, Registerer: reg, RestConfig: o.restConfig,
		ResyncPeriod: resync, RetryInterval: time.Second,
		Workers: o.workers, EvalTimeout: o.evalTimeout, Gone: o.gone, RuleCounter: o.counter,
	}
	if o.sharedCache {
		inst.cache, err = clustercache.New(mgr.GetConfig(), mgr.GetRESTMapper(), clustercache.Options{Logger: log, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		if err := mgr.Add(inst.cache); err != nil {
			t.Fatal(err)
		}
		ao.Cache = inst.cache
	}
	if o.crRules {
		inst.counts = rule.NewStatusCounts(mgr.GetClient(), rule.CountOptions{Interval: 200 * time.Millisecond, QPS: 20, Logger: log, Registerer: reg})
		if err := mgr.Add(inst.counts); err != nil {
			t.Fatal(err)
		}
		ao.RuleCounter = inst.counts
	}
	inst.layer, err = audit.Setup(mgr, eng, ao)
	if err != nil {
		t.Fatal(err)
	}
	if o.producer != "" {
		if inst.producer, err = inst.layer.Findings.Register(o.producer, findings.ProducerOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if o.crRules {
		index := rule.NewIndex(eng)
		index.OnChange(inst.layer.Source.RulesChanged)
		loader := rule.NewCRLoader(mgr.GetCache(), eng, index, log, rule.NewMetrics(nil))
		if err := loader.SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	inst.cancel = cancel
	go func() { inst.done <- mgr.Start(ctx) }()
	t.Cleanup(func() { inst.stop(t) })
	return inst
}

// registrySinks builds the report sinks the flags args configure, as
// `portal run` does, leaving out the metrics and log sinks every instance
// has already.
func registrySinks(t *testing.T, mgr ctrl.Manager, log *slog.Logger, reg prometheus.Registerer, args ...string) []core.OutputSink {
	t.Helper()
	so := sink.Defaults()
	so.Logger, so.Registerer = log, reg
	if err := so.Parse(append([]string{"--audit-metrics=false", "--audit-log-findings=false"}, args...)...); err != nil {
		t.Fatal(err)
	}
	built, err := sink.New(mgr, so)
	if err != nil {
		t.Fatal(err)
	}
	return built
}

// stop stops the instance and waits for its manager (releasing the Lease).
func (i *instance) stop(t *testing.T) {
	i.once.Do(func() {
		i.cancel()
		if err := waitDone(i.done); err != nil {
			t.Errorf("stop instance: %v", err)
		}
	})
}

func (i *instance) metric(t *testing.T, name string, match map[string]string) float64 {
	t.Helper()
	return metric(t, i.reg, name, match)
}

func (i *instance) leader(t *testing.T) bool {
	return i.metric(t, "portal_audit_leader", nil) == 1
}

func pod(ns, name string, privileged bool, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Image: "registry.example/app:1",
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(privileged)},
		}}},
	}
}

func create(t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// reportState is what the PolicyReports of a namespace say.
type reportState struct {
	reports []reportsv1alpha2.PolicyReport
	// results counts each "policy/name/container" across all shards.
	results map[string]int
	fail    int
}

func (r reportState) has(key string) bool { return r.results[key] > 0 }

func readReports(t *testing.T, c client.Client, ns string) (reportState, error) {
	t.Helper()
	var l reportsv1alpha2.PolicyReportList
	if err := c.List(context.Background(), &l, client.InNamespace(ns), client.MatchingLabels{policyreport.LabelManagedBy: policyreport.ManagedBy}); err != nil {
		return reportState{}, err
	}
	st := reportState{reports: l.Items, results: map[string]int{}}
	for _, r := range l.Items {
		for _, res := range r.Results {
			st.results[resultKey(res)]++
		}
		st.fail += r.Summary.Fail
	}
	return st, nil
}

func resultKey(res reportsv1alpha2.PolicyReportResult) string {
	name := ""
	if len(res.Resources) > 0 {
		name = res.Resources[0].Name
	}
	return res.Policy + "/" + name + "/" + res.Properties["container"]
}

// checkReports asserts the invariants every report keeps: summary counts
// equal to its results, a size far under the object limit, the shard label,
// and no result listed twice across shards.
func checkReports(t *testing.T, st reportState) {
	t.Helper()
	for _, r := range st.reports {
		fail, errs := 0, 0
		for _, res := range r.Results {
			switch res.Result {
			case reportsv1alpha2.ResultFail:
				fail++
			case reportsv1alpha2.ResultError:
				errs++
			}
		}
		if r.Summary.Fail != fail || r.Summary.Error != errs {
			t.Errorf("report %s/%s: summary fail=%d error=%d, results say %d and %d", r.Namespace, r.Name, r.Summary.Fail, r.Summary.Error, fail, errs)
		}
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) >= 1<<20 {
			t.Errorf("report %s/%s is %d bytes, not under 1 MiB", r.Namespace, r.Name, len(data))
		}
		writer, shard := r.Labels[policyreport.LabelWriter], r.Labels[policyreport.LabelShard]
		want := writer
		if shard != "0" {
			want += "-" + shard
		}
		if writer == "" || r.Name != want {
			t.Errorf("report %s/%s has writer label %q and shard label %q", r.Namespace, r.Name, writer, shard)
		}
	}
	for k, n := range st.results {
		if n != 1 {
			t.Errorf("result %s listed %d times", k, n)
		}
	}
}

func podRule(name, ns, expr, message string) string {
	return fmt.Sprintf(`
name: %s
severity: critical
mode: [audit]
match:
  gvk: [{group: "", kind: Pod}]
  namespaces: {include: [%s]}
rule: %s
message: %q
---`, name, ns, expr, message)
}

// namespaceOwnerRule is an audit rule failing the Namespaces labelled
// portal-test=ns that have no owner label.
func namespaceOwnerRule(name, ns string) string {
	return fmt.Sprintf(`
name: %s
severity: medium
mode: [audit]
match:
  gvk: [{group: "", kind: Namespace}]
  labelSelector: {matchLabels: {portal-test: %s}}
rule: metadata.labels?.owner == nil
---`, name, ns)
}

const privileged = "container.securityContext?.privileged == true"
