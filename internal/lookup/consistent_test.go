package lookup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/lookup"
)

// tally counts the API server's answers to ConfigMap reads and the bytes of
// their bodies: what a consistent lookup cost Portal.
type tally struct {
	next http.RoundTripper

	mu          sync.Mutex
	gets, lists int
	received    int64
}

func (t *tally) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || !strings.Contains(req.URL.Path, "/configmaps") {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	t.mu.Lock()
	defer t.mu.Unlock()
	if strings.HasSuffix(req.URL.Path, "/configmaps") {
		t.lists++
	} else {
		t.gets++
	}
	t.received += int64(len(body))
	return resp, err
}

func (t *tally) counts() (gets, lists int, received int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gets, t.lists, t.received
}

// consistentFixture creates n ConfigMaps labelled set=ns in namespace ns,
// each holding size bytes, and returns an engine whose cluster.consistent.*
// reads go to the API server through a tally, under limits.
func consistentFixture(t *testing.T, ns string, n, size int, limits exprlang.Limits, expr string) (*engine.Engine, *tally) {
	t.Helper()
	ctx := context.Background()
	cl := shared.Cluster(t)
	cfg := rest.CopyConfig(cl.Config)
	cfg.QPS, cfg.Burst = -1, 0
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("cm-", i), Labels: map[string]string{"set": ns}},
			Data: map[string]string{"k": strings.Repeat("x", size)}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	tl := &tally{}
	apiCfg := rest.CopyConfig(cfg)
	apiCfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { tl.next = rt; return tl }
	stale := lookup.FromReader{R: (&clustercache.StaticBuilder{}).Build()}
	l := lookup.New(lookup.Options{Cache: stale, API: lookup.DynamicAPI{Client: dynamic.NewForConfigOrDie(apiCfg)}, Resolver: lookup.NewMapperResolver(mapper)})
	e := engine.New(exprlang.New(exprlang.WithLimits(limits)), engine.WithBinder(l))
	r, err := e.Compile(rule("consistent", "", expr, core.GVK{Version: "v1", Kind: "ConfigMap"}))
	if err != nil {
		t.Fatal(err)
	}
	e.SetRules([]*engine.Rule{r})
	return e, tl
}

// admit evaluates the rules on a new ConfigMap elsewhere, at admission.
func admit(t *testing.T, e *engine.Engine) core.Result {
	t.Helper()
	inbound := u(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md("elsewhere", "new", nil)})
	res, err := e.Evaluate(context.Background(), inbound, engine.Options{Mode: core.ModeAdmission, Request: &core.Request{Operation: "CREATE"}})
	if err != nil || len(res) != 1 {
		t.Fatalf("evaluate: %v %v", res, err)
	}
	return res[0]
}

func budgetKind(r core.Result) core.BudgetKind {
	if be, ok := errors.AsType[*core.BudgetError](r.Err); ok {
		return be.Kind
	}
	return ""
}

// TestConsistentListStopsAtTheBudget lists 2 MiB of ConfigMaps from the
// API server with a 256 KiB byte budget: the list fails with the byte
// budget after its first page, having received far less than the
// namespace holds, where reading it whole first would take all 2 MiB.
func TestConsistentListStopsAtTheBudget(t *testing.T) {
	const n, size = 64, 32 << 10
	e, tl := consistentFixture(t, "consistent-budget", n, size, exprlang.Limits{Bytes: 256 << 10},
		`len(cluster.consistent.configmaps.list("consistent-budget", "set=consistent-budget")) > 0`)
	res := admit(t, e)
	if res.Outcome != core.OutcomeError || budgetKind(res) != core.BudgetBytes {
		t.Fatalf("outcome %s (%s), want the byte budget error", res.Outcome, res.Message)
	}
	_, lists, received := tl.counts()
	if lists != 1 || received > n*size/2 {
		t.Errorf("%d list requests received %d bytes of %d, want one page, well under half", lists, received, n*size)
	}
}

// TestConsistentListReadsEveryPage lists 40 small ConfigMaps, more than the
// first page holds: the rule sees all of them, in two requests (the second
// page sized from the first), without managedFields, as the cache serves
// them.
func TestConsistentListReadsEveryPage(t *testing.T) {
	e, tl := consistentFixture(t, "consistent-pages", 40, 10, exprlang.DefaultLimits(),
		`let l = cluster.consistent.configmaps.list("consistent-pages", "set=consistent-pages");
		 len(l) == 40 && none(l, #.metadata.managedFields != nil) && cluster.consistent.configmaps.byName("consistent-pages", "cm-0").metadata.managedFields == nil`)
	if res := admit(t, e); res.Outcome != core.OutcomeFail {
		t.Fatalf("outcome %s (%s), want fail: the list held all 40", res.Outcome, res.Message)
	}
	if _, lists, _ := tl.counts(); lists != 2 {
		t.Errorf("%d list requests, want 2", lists)
	}
}

// TestConsistentReadsStopAtTheReadCap loops over a consistent byName: the
// API server is asked MaxConsistentReads times, then the evaluation ends in
// the read budget error instead of reading on.
func TestConsistentReadsStopAtTheReadCap(t *testing.T) {
	e, tl := consistentFixture(t, "consistent-cap", 1, 10, exprlang.DefaultLimits(),
		`len(map(1..990, {cluster.consistent.configmaps.byName("consistent-cap", "cm-0")})) > 0`)
	res := admit(t, e)
	if res.Outcome != core.OutcomeError || budgetKind(res) != core.BudgetAPIReads || !strings.Contains(res.Message, fmt.Sprint(exprlang.MaxConsistentReads)) {
		t.Fatalf("outcome %s (%s), want the read budget error naming %d", res.Outcome, res.Message, exprlang.MaxConsistentReads)
	}
	if gets, _, _ := tl.counts(); gets != exprlang.MaxConsistentReads {
		t.Errorf("%d reads of the API server, want %d", gets, exprlang.MaxConsistentReads)
	}
}
