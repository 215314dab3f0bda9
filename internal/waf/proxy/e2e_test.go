package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"k8s.io/apimachinery/pkg/types"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/waf"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/test/waftest"
)

// The control plane and Portal's WAF layer (RuleSet compiler, status
// writer, cache server), as `portal run --waf` wires them, shared by the
// end-to-end test and the propagation benchmark and started on first use.
var (
	clusterEnv struct {
		client client.Client
		layer  *waf.Layer
		cache  *cache.Client
		waf    *waftest.Env
	}
	shared = devtest.Shared{Setup: func(cl *devcluster.Cluster) (func() error, error) {
		ctrl.SetLogger(logr.Discard())
		e, stop, err := waftest.Start(cl, discard())
		if err != nil {
			return nil, err
		}
		clusterEnv.client, clusterEnv.layer, clusterEnv.cache, clusterEnv.waf = e.Client, e.Layer, e.Cache, e
		return stop, nil
	}}
)

func TestMain(m *testing.M) { shared.Main(m) }

func portal(tb testing.TB) {
	tb.Helper()
	shared.Cluster(tb)
}

const crsSource = "Include @coraza.conf-recommended\nInclude @crs-setup.conf.example\nInclude @owasp_crs/*.conf\n"

// tuning switches the CRS to blocking and adds a rule that denies ?q=word.
func tuning(word string) string {
	return fmt.Sprintf("SecRuleEngine On\nSecRule ARGS:q \"@streq %s\" \"id:100001,phase:1,deny,status:403,log,msg:'custom %s'\"\n", word, word)
}

// namespaces numbers the namespaces of the tests and benchmarks, which may
// run more than once in a process (-count, benchmark rounds).
var namespaces atomic.Int64

// guardedRuleSet creates, in a new namespace named after prefix, the CRS in
// blocking mode plus the tuning rule for word, and returns the namespace.
func guardedRuleSet(tb testing.TB, prefix, word string) string {
	tb.Helper()
	ctx := context.Background()
	nsName := fmt.Sprintf("%s-%d", prefix, namespaces.Add(1))
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}},
		&wafv1alpha1.RuleSource{ObjectMeta: metav1.ObjectMeta{Namespace: nsName, Name: "crs"}, Spec: wafv1alpha1.RuleSourceSpec{Rules: crsSource}},
		&wafv1alpha1.RuleSource{ObjectMeta: metav1.ObjectMeta{Namespace: nsName, Name: "tuning"}, Spec: wafv1alpha1.RuleSourceSpec{Rules: tuning(word)}},
		&wafv1alpha1.RuleSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: nsName, Name: "guard", Annotations: map[string]string{wafv1alpha1.AnnotationAllowUnsupportedRules: "true"}},
			Spec:       wafv1alpha1.RuleSetSpec{Sources: []wafv1alpha1.SourceReference{{Name: "crs"}, {Name: "tuning"}}},
		},
	}
	for _, o := range objs {
		if err := clusterEnv.client.Create(ctx, o); err != nil {
			tb.Fatal(err)
		}
	}
	return nsName
}

// setTuning rewrites the tuning RuleSource to block word.
func setTuning(tb testing.TB, ns, word string) {
	tb.Helper()
	// A merge patch: Portal writes the RuleSource's status meanwhile.
	src := &wafv1alpha1.RuleSource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tuning"}}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"rules": tuning(word)}})
	if err := clusterEnv.client.Patch(context.Background(), src, client.RawPatch(types.MergePatchType, patch)); err != nil {
		tb.Fatal(err)
	}
}

// status sends GET /?q=word with a browser-like Host through the proxy.
func status(h *harness, q string) (int, error) {
	code, _, err := send(h.front.Client(), "GET", h.front.URL+"/?q="+q, "", "Accept", "text/html", "Host", "app.example")
	return code, err
}

// dataPlaneClient is the cache client `portal waf-proxy --ca-file
// --token-file` builds: a token of a ServiceAccount of ns for the cache's
// audience in a file, as a projected volume holds it, and the cache's CA
// bundle in another, both read again before each request.
func dataPlaneClient(tb testing.TB, ns string) *cache.Client {
	tb.Helper()
	token, err := clusterEnv.waf.Token(context.Background(), ns, "waf-proxy", cache.Audience)
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	caFile, tokenFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	if err := errors.Join(os.WriteFile(caFile, clusterEnv.layer.Certs.CABundle(), 0o600), os.WriteFile(tokenFile, []byte(token), 0o600)); err != nil {
		tb.Fatal(err)
	}
	transport, err := cache.NewCATransport(caFile)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := cache.NewClient(clusterEnv.waf.URL, &http.Client{Transport: transport, Timeout: 30 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	c.Token = cache.TokenFile(tokenFile)
	return c
}

// TestEndToEnd: a RuleSet created in the API server is compiled by Portal,
// served by its cache over TLS to a waf-proxy that proves itself with a
// ServiceAccount token of the rule set's namespace, and enforced; a change
// of a RuleSource is enforced while a steady background load sees no failed
// request.
func TestEndToEnd(t *testing.T) {
	portal(t)
	ns := guardedRuleSet(t, "waf-proxy-e2e", "first")
	h := newHarness(t, nil)
	poller := &Poller{Client: dataPlaneClient(t, ns), Namespace: ns, Name: "guard", Interval: MinPollInterval, Target: h.proxy, Logger: discard(), Metrics: h.metrics}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = poller.Run(ctx) }()

	eventually30(t, "the first revision enforced", func() bool { code, _ := status(h, "first"); return code == 403 })
	if code, err := status(h, "hello"); code != 200 || err != nil {
		t.Fatalf("clean request: %d %v", code, err)
	}
	hits := h.upstream.hits.Load()
	if code, _ := status(h, "<script>alert(1)</script>"); code != 403 || h.upstream.hits.Load() != hits {
		t.Fatalf("CRS attack: %d (upstream hits %d -> %d), want 403 and no hit", code, hits, h.upstream.hits.Load())
	}

	load := startLoad(h, 4)
	load.waitFor(t, 100)
	setTuning(t, ns, "second")
	start := time.Now()
	// How soon is a figure for docs/performance.md ("Propagation"), not an
	// assertion: on a loaded CI machine the compile alone can take seconds.
	eventually30(t, "the changed RuleSource enforced", func() bool {
		code, err := status(h, "second")
		if err != nil {
			t.Fatal(err)
		}
		return code == 403
	})
	t.Logf("RuleSource change enforced after %s", time.Since(start).Round(time.Millisecond))
	before := load.done.Load()
	load.waitFor(t, before+100)
	if err := load.stop(); err != nil {
		t.Fatal(err)
	}
	if code, _ := status(h, "first"); code != 200 {
		t.Fatalf("the old rule is still enforced: %d", code)
	}
	t.Logf("background load: %d requests, all answered as expected", load.done.Load())
}

// backgroundLoad is a steady load of clean requests and CRS attacks whose
// answers do not depend on the tuning rule: 200 and 403.
type backgroundLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   atomic.Int64
	errMu  sync.Mutex
	err    error
}

// maxLoadRequests bounds the requests of one worker: enough for the
// longest wait the test allows (30 s for enforcement) at the rates a
// proxy on these machines reaches.
const maxLoadRequests = 500000

func startLoad(h *harness, workers int) *backgroundLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &backgroundLoad{cancel: cancel}
	for w := range workers {
		l.wg.Go(func() {
			for i := 0; i < maxLoadRequests && ctx.Err() == nil; i++ {
				q, want := "hello", 200
				if (i+w)%2 == 1 {
					q, want = "<script>alert(1)</script>", 403
				}
				code, err := status(h, q)
				if err == nil && code != want {
					err = fmt.Errorf("GET ?q=%s: %d, want %d", q, code, want)
				}
				if err != nil {
					l.errMu.Lock()
					l.err = errors.Join(l.err, fmt.Errorf("worker %d request %d: %w", w, i, err))
					l.errMu.Unlock()
					return
				}
				l.done.Add(1)
			}
		})
	}
	return l
}

func (l *backgroundLoad) waitFor(t *testing.T, n int64) {
	t.Helper()
	eventually30(t, fmt.Sprintf("%d background requests", n), func() bool { return l.done.Load() >= n || l.failed() })
}

func (l *backgroundLoad) failed() bool {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.err != nil
}

func (l *backgroundLoad) stop() error {
	l.cancel()
	l.wg.Wait()
	return l.err
}

// eventually30 is eventually with the 30 s deadline the control plane
// needs on a busy machine.
func eventually30(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}
