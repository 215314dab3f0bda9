package controller_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/certs"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/waf"
	"github.com/vilaca/portal/internal/waf/controller"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// holdMarker in a RuleSource makes the test's compile function hold the
// compile until the test ends, ignoring its deadline: the worst case of a
// compile that does not stop.
const holdMarker = "# portal-test: hold this compile"

// panicMarker makes the test's compile function panic, as a compiler bug
// triggered by input would.
const panicMarker = "# portal-test: panic in this compile"

// Limits of the WAF layer under test.
const (
	testConcurrency   = 2
	testTimeout       = 3 * time.Second
	testMaxDataFile   = 64 << 10
	testMaxLastGood   = 512 << 10
	testMaxRuleSet    = controller.DefaultMaxRuleSetBytes
	bigSourceBytes    = 1 << 20
	bigSourcesPerSet  = 5
	rssBoundMiB       = 16
	smallRule         = "SecRule ARGS \"@rx evil\" \"id:1,phase:2,deny\"\n"
	compileTimeoutMsg = "--waf-compile-timeout"
)

var (
	env struct {
		client client.Client
		reg    *prometheus.Registry
		// held counts compiles the hold marker holds; release ends them.
		held    atomic.Int32
		release chan struct{}
	}
	shared = devtest.Shared{Setup: setup}
)

func TestMain(m *testing.M) { shared.Main(m) }

func setup(cl *devcluster.Cluster) (func() error, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, wafv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	mgr, err := devtest.NewManager(cl, scheme)
	if err != nil {
		return nil, err
	}
	env.reg = prometheus.NewRegistry()
	env.release = make(chan struct{})
	opts := waf.DefaultOptions()
	opts.CacheAddr = "127.0.0.1:0"
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	opts.Registerer = env.reg
	if opts.Certificates, err = certs.Setup(mgr, certs.CacheOptions(opts.Namespace, opts.CacheService, opts.CacheCertSecret, opts.Logger, env.reg), "waf-cache-certificate"); err != nil {
		return nil, err
	}
	opts.Compile = controller.CompilerOptions{
		Concurrency:      testConcurrency,
		CompileTimeout:   testTimeout,
		MaxDataFileBytes: testMaxDataFile,
		MaxLastGoodBytes: testMaxLastGood,
		Compile: func(ctx context.Context, b ruleset.Bundle, o ruleset.Options) (*ruleset.Compiled, error) {
			if strings.Contains(b.Rules, panicMarker) {
				panic("compiler bug")
			}
			if strings.Contains(b.Rules, holdMarker) {
				env.held.Add(1)
				<-env.release
				return nil, errors.New("held")
			}
			return ruleset.CompileContext(ctx, b, o)
		},
	}
	if _, err := waf.Setup(mgr, opts); err != nil {
		return nil, err
	}
	stop := devtest.Run(mgr)
	if env.client, err = client.New(cl.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, errors.Join(err, stop())
	}
	var once sync.Once
	return func() error {
		once.Do(func() { close(env.release) })
		return stop()
	}, nil
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.client.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

func namespace(t *testing.T, name string) string {
	t.Helper()
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	return name
}

func source(ns, name, rules string) *wafv1alpha1.RuleSource {
	return &wafv1alpha1.RuleSource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: wafv1alpha1.RuleSourceSpec{Rules: rules}}
}

func ruleSet(ns, name string, sources []string, data ...string) *wafv1alpha1.RuleSet {
	rs := &wafv1alpha1.RuleSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	for _, s := range sources {
		rs.Spec.Sources = append(rs.Spec.Sources, wafv1alpha1.SourceReference{Name: s})
	}
	for _, d := range data {
		rs.Spec.Data = append(rs.Spec.Data, wafv1alpha1.DataReference{Name: d})
	}
	return rs
}

// ready reads the RuleSet's Ready condition.
func ready(t *testing.T, rs *wafv1alpha1.RuleSet) *metav1.Condition {
	t.Helper()
	if err := env.client.Get(context.Background(), client.ObjectKeyFromObject(rs), rs); err != nil {
		t.Fatal(err)
	}
	return meta.FindStatusCondition(rs.Status.Conditions, wafv1alpha1.ConditionReady)
}

// readyWith waits until Ready has this status and reason and returns it.
func readyWith(t *testing.T, rs *wafv1alpha1.RuleSet, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	devtest.Eventually(t, fmt.Sprintf("%s/%s Ready=%s/%s", rs.Namespace, rs.Name, status, reason), func() bool {
		c = ready(t, rs)
		return c != nil && c.Status == status && c.Reason == reason
	})
	return c
}

// metric returns the value of a gauge, a counter with label result=label,
// or a histogram's sample count.
func metric(t *testing.T, name, label string) float64 {
	t.Helper()
	mfs, err := env.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// TestStuckCompileDoesNotBlockOtherNamespaces: one namespace's RuleSets are
// stuck in compiles that never end. Another namespace's RuleSet still
// compiles and becomes Ready, the stuck one is reported CompileTimeout, and
// the stuck namespace never holds more than its share of the compile slots.
func TestStuckCompileDoesNotBlockOtherNamespaces(t *testing.T) {
	shared.Cluster(t)
	slow := namespace(t, "waf-stuck")
	create(t, source(slow, "held", holdMarker+"\n"+smallRule))
	stuck := []*wafv1alpha1.RuleSet{ruleSet(slow, "stuck-1", []string{"held"}), ruleSet(slow, "stuck-2", []string{"held"})}
	create(t, stuck[0], stuck[1])
	devtest.Eventually(t, "a held compile", func() bool { return env.held.Load() >= 1 })

	fast := namespace(t, "waf-unblocked")
	create(t, source(fast, "rules", smallRule))
	rs := ruleSet(fast, "guard", []string{"rules"})
	create(t, rs)
	readyWith(t, rs, metav1.ConditionTrue, wafv1alpha1.ReasonRulesCached)

	// The held compile passes its deadline: CompileTimeout, with the flag
	// to raise in the message.
	devtest.Eventually(t, "a stuck RuleSet reported CompileTimeout", func() bool {
		for _, s := range stuck {
			if c := ready(t, s); c != nil && c.Reason == wafv1alpha1.ReasonCompileTimeout && strings.Contains(c.Message, compileTimeoutMsg) {
				return true
			}
		}
		return false
	})
	// The runaway compile keeps the namespace's one slot: the other stuck
	// RuleSet waits instead of starting a second runaway compile.
	if n := env.held.Load(); n != 1 {
		t.Fatalf("%d held compiles started in one namespace; its share is 1 of %d slots", n, testConcurrency)
	}
	if n := metric(t, "portal_waf_ruleset_compiles_in_flight", ""); n > testConcurrency {
		t.Fatalf("%v compiles in flight; the bound is %d", n, testConcurrency)
	}
}

// peakRSS resets the process's peak resident set size and returns a
// function that reports how far it rose since.
func peakRSS(t *testing.T) func() int64 {
	t.Helper()
	read := func(field string) int64 {
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return kb << 10
			}
		}
		t.Fatalf("no %s in /proc/self/status", field)
		return 0
	}
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("reset peak RSS: %v", err)
	}
	base := read("VmRSS")
	return func() int64 { return read("VmHWM") - base }
}

// bigRules is about n bytes of distinct regex rules: costly for Coraza to
// compile, as a hostile tenant would write them.
func bigRules(prefix string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n-200; i++ {
		fmt.Fprintf(&b, "SecRule ARGS \"@rx %s-%d-(a|b)+c{2,9}[x-z]\" \"id:%d,phase:2,pass,nolog\"\n", prefix, i, 1000000+i)
	}
	return b.String()
}

// TestTooLargeRuleSetRejectedBeforeJoin: a RuleSet whose sources together
// exceed --waf-max-ruleset-bytes is rejected with reason TooLarge and a
// message naming the limit, without being joined or compiled: no compile
// runs and the process's peak memory barely moves.
func TestTooLargeRuleSetRejectedBeforeJoin(t *testing.T) {
	shared.Cluster(t)
	ns := namespace(t, "waf-too-large")
	var names []string
	for i := range bigSourcesPerSet {
		name := fmt.Sprintf("big-%d", i)
		create(t, source(ns, name, bigRules(name, bigSourceBytes)))
		names = append(names, name)
	}
	// A RuleSet of a source created after them is Ready once the
	// informers hold the big sources too: measure from there.
	create(t, source(ns, "small", smallRule))
	probe := ruleSet(ns, "probe", []string{"small"})
	create(t, probe)
	readyWith(t, probe, metav1.ConditionTrue, wafv1alpha1.ReasonRulesCached)

	compiles := metric(t, "portal_waf_ruleset_compile_duration_seconds", "")
	rise := peakRSS(t)
	rs := ruleSet(ns, "huge", names)
	create(t, rs)
	c := readyWith(t, rs, metav1.ConditionFalse, wafv1alpha1.ReasonTooLarge)
	if !strings.Contains(c.Message, "--waf-max-ruleset-bytes") || !strings.Contains(c.Message, strconv.Itoa(testMaxRuleSet)) {
		t.Fatalf("message %q does not name the limit", c.Message)
	}
	if n := metric(t, "portal_waf_ruleset_compile_duration_seconds", ""); n != compiles {
		t.Fatalf("%v compiles ran for a RuleSet over the limit", n-compiles)
	}
	r := rise()
	t.Logf("peak RSS rose by %d MiB", r>>20)
	if r > rssBoundMiB<<20 {
		t.Fatalf("peak RSS rose by %d MiB rejecting the RuleSet; the bound is %d MiB", r>>20, rssBoundMiB)
	}
}

// TestDataFileTooLarge: a data file over --waf-max-data-file-bytes read by
// @pmFromFile is rejected with reason TooLarge, on the rule that reads it.
func TestDataFileTooLarge(t *testing.T) {
	shared.Cluster(t)
	ns := namespace(t, "waf-big-data")
	words := strings.Repeat("evilword\n", testMaxDataFile/9+1)
	create(t, source(ns, "rules", "SecRule ARGS \"@pmFromFile words.txt\" \"id:1,phase:2,deny\"\n"),
		&wafv1alpha1.RuleData{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "words"},
			Spec: wafv1alpha1.RuleDataSpec{Files: map[string]string{"words.txt": words}}})
	rs := ruleSet(ns, "guard", []string{"rules"}, "words")
	create(t, rs)
	c := readyWith(t, rs, metav1.ConditionFalse, wafv1alpha1.ReasonTooLarge)
	if e := rs.Status.Error; e == nil || e.Source != "rules" || e.Line != 1 || !strings.Contains(c.Message, "--waf-max-data-file-bytes") {
		t.Fatalf("error %+v, message %q", rs.Status.Error, c.Message)
	}
}

// TestLastGoodWAFsBounded: the last good WAFs kept open stay within
// --waf-max-last-good-bytes, and the metric says how much they weigh.
func TestLastGoodWAFsBounded(t *testing.T) {
	shared.Cluster(t)
	ns := namespace(t, "waf-last-good")
	for i := range 4 {
		name := fmt.Sprintf("set-%d", i)
		create(t, source(ns, name, bigRules(name, testMaxLastGood*2/5)))
		rs := ruleSet(ns, name, []string{name})
		create(t, rs)
		readyWith(t, rs, metav1.ConditionTrue, wafv1alpha1.ReasonRulesCached)
		if b := metric(t, "portal_waf_ruleset_last_good_bytes", ""); b > testMaxLastGood || b <= 0 {
			t.Fatalf("last good WAFs weigh %v bytes; the bound is %d", b, testMaxLastGood)
		}
	}
	if n := metric(t, "portal_waf_ruleset_last_good_wafs", ""); n < 1 || n >= 4 {
		t.Fatalf("%v last good WAFs kept of 4 that do not fit together", n)
	}
}

// TestCompilePanicIsAnError: a compile that panics (a compiler bug some
// input triggers) fails that RuleSet and nothing else: the compile runs
// outside the reconciler, where a panic would end the process.
func TestCompilePanicIsAnError(t *testing.T) {
	shared.Cluster(t)
	ns := namespace(t, "waf-panic")
	create(t, source(ns, "boom", panicMarker+"\n"+smallRule), source(ns, "fine", smallRule))
	bad, good := ruleSet(ns, "bad", []string{"boom"}), ruleSet(ns, "good", []string{"fine"})
	create(t, bad)
	c := readyWith(t, bad, metav1.ConditionFalse, wafv1alpha1.ReasonInvalidRuleSet)
	if !strings.Contains(c.Message, "compiler bug") {
		t.Fatalf("message %q", c.Message)
	}
	create(t, good)
	readyWith(t, good, metav1.ConditionTrue, wafv1alpha1.ReasonRulesCached)
}
