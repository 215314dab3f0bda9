package admission_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

// gate is an Evaluator whose evaluations of objects in namespace hold wait
// until the test lets one go (release) or all (open), as a slow rule would;
// it records the namespace of every evaluation in the order they started,
// and the most that ran at once.
type gate struct {
	hold    string
	release chan struct{}
	open    chan struct{}

	mu      sync.Mutex
	started []string
	running int
	peak    int
	waiting int // evaluations of hold blocked now
}

func newGate(hold string) *gate {
	return &gate{hold: hold, release: make(chan struct{}), open: make(chan struct{})}
}

func (g *gate) Evaluate(ctx context.Context, obj *unstructured.Unstructured, _ engine.Options) ([]core.Result, error) {
	ns := obj.GetNamespace()
	g.mu.Lock()
	g.started = append(g.started, ns)
	g.running++
	g.peak = max(g.peak, g.running)
	held := ns == g.hold
	if held {
		g.waiting++
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		if held {
			g.waiting--
		}
		g.mu.Unlock()
	}()
	if !held {
		return nil, nil
	}
	select {
	case <-g.release:
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return nil, nil
}

// state returns the evaluations started so far, how many of hold's are
// blocked now, and the most that ran at once.
func (g *gate) state() (started []string, blocked, peak int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.started...), g.waiting, g.peak
}

func (g *gate) forget() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.started = nil
}

// TestThrottledAnswer: a request that gets no evaluation slot is answered
// 429 TooManyRequests with Retry-After and a message naming the cause,
// counted as decision "throttled" and by reason, without touching
// readiness; with FailOpen it is admitted with that message as a warning.
func TestThrottledAnswer(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("failOpen=%v", failOpen), func(t *testing.T) {
			g := newGate("a")
			defer close(g.open)
			wh, err := admission.New(admission.Options{
				Evaluator: g, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler),
				FailOpen: failOpen, MaxConcurrentEvaluations: 1, MaxWaitingPerNamespace: 1,
			})
			if err != nil {
				t.Fatal(err)
			}
			m := wh.Metrics()
			var held sync.WaitGroup
			for i := range 2 {
				held.Go(func() { post(t, wh, review(fmt.Sprintf("held-%d", i), "CREATE", "a", false)) })
				eventually(t, "request held or waiting", func() bool {
					_, blocked, _ := g.state()
					return blocked+int(testutil.ToFloat64(m.Waiting)) == i+1
				})
			}
			full := post(t, wh, review("full", "CREATE", "a", false))
			late := postPath(t, wh, admission.Path+"?timeout=1ns", review("late", "CREATE", "b", false))
			for _, c := range []struct {
				resp  *admissionv1.AdmissionResponse
				cause string
			}{
				{full, "too many requests of the same namespace are already waiting"},
				{late, "no evaluation slot became free before the request's deadline"},
			} {
				checkThrottled(t, c.resp, c.cause, failOpen)
			}
			if got := testutil.ToFloat64(m.Requests.WithLabelValues(admission.DecisionThrottled)); got != 2 {
				t.Errorf("requests{decision=throttled} = %v, want 2", got)
			}
			for _, r := range []string{admission.ThrottledQueueFull, admission.ThrottledDeadline} {
				if got := testutil.ToFloat64(m.Throttled.WithLabelValues(r)); got != 1 {
					t.Errorf("throttled{reason=%s} = %v, want 1", r, got)
				}
			}
			if err := wh.ReadyCheck()(nil); err != nil {
				t.Errorf("throttling made the webhook unready: %v", err)
			}
			g.release <- struct{}{}
			g.release <- struct{}{}
			held.Wait()
		})
	}
}

func checkThrottled(t *testing.T, resp *admissionv1.AdmissionResponse, cause string, failOpen bool) {
	t.Helper()
	if failOpen {
		if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], cause) ||
			!strings.Contains(resp.Warnings[0], "admitted: Portal runs fail-open") {
			t.Errorf("want admitted with a warning saying %q, got %+v", cause, resp)
		}
		return
	}
	r := resp.Result
	if resp.Allowed || r == nil || r.Code != http.StatusTooManyRequests || r.Reason != metav1.StatusReasonTooManyRequests ||
		r.Details == nil || r.Details.RetryAfterSeconds != 1 || !strings.Contains(r.Message, cause) ||
		!strings.Contains(r.Message, "--webhook-max-concurrent-evaluations") {
		t.Errorf("want 429 TooManyRequests, retry after 1s, saying %q, got allowed=%v %+v", cause, resp.Allowed, r)
	}
}

// fairnessFlood is how many requests namespace A sends at once, and
// fairnessSlots the webhook's evaluation slots.
const (
	fairnessFlood = 10
	fairnessSlots = 2
)

// TestFloodedNamespaceDoesNotStarveAnother: namespace A floods the webhook
// port with reviews whose evaluation is slow, holding every evaluation slot
// with more of its requests waiting; a ConfigMap create in namespace B,
// sent through the API server, is evaluated after at most one more of A's
// requests per namespace ahead of it in the round, not after all of A's,
// and admitted. No more than the bound ever evaluate at once, and every
// one of A's requests is answered once the evaluations go on.
func TestFloodedNamespaceDoesNotStarveAnother(t *testing.T) {
	cluster(t)
	ctx := context.Background()
	// Namespaces never finish terminating without a namespace controller:
	// fresh names let the test run again against the same control plane.
	suffix := rand.Text()[:6]
	nsA, nsB, name := "fair-flood-"+strings.ToLower(suffix), "fair-quiet-"+strings.ToLower(suffix), "portal-fairness"
	namespace(t, nsA, nil)
	namespace(t, nsB, nil)
	g := newGate(nsA)
	p := startFairnessPortal(t, name, g, nsA, nsB)
	m := p.webhook.Metrics()

	// The API server picks the new configuration up a moment after it is
	// written.
	eventually(t, "the API server sends B's creates to Portal", func() bool {
		_ = env.client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: nsB}}, client.DryRunAll)
		started, _, _ := g.state()
		return len(started) > 0
	})
	g.forget()

	answers := floodWebhook(t, p.port, nsA)
	eventually(t, "A's flood holding every slot, the rest waiting", func() bool {
		_, blocked, peak := g.state()
		if peak > fairnessSlots {
			t.Fatalf("%d evaluations ran at once, over the bound of %d", peak, fairnessSlots)
		}
		return blocked == fairnessSlots && testutil.ToFloat64(m.Waiting) == fairnessFlood-fairnessSlots
	})
	bErr := make(chan error, 1)
	go func() {
		bErr <- env.client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: nsB}}, client.DryRunAll)
	}()
	eventually(t, "B's request waiting too", func() bool { return testutil.ToFloat64(m.Waiting) == fairnessFlood-fairnessSlots+1 })

	aBefore := releaseUntil(t, g, nsB)
	if err := <-bErr; err != nil {
		t.Fatalf("B's create: %v; want admitted", err)
	}
	// Two namespaces waiting: B's turn comes at the latest after one more
	// of A's; a single FIFO would have run all of A's first.
	if aBefore > fairnessSlots+1 {
		t.Errorf("B was evaluated after %d of A's %d requests, want at most %d", aBefore, fairnessFlood, fairnessSlots+1)
	}
	close(g.open)
	for range fairnessFlood {
		if err := <-answers; err != nil {
			t.Error(err)
		}
	}
	if _, _, peak := g.state(); peak > fairnessSlots {
		t.Errorf("%d evaluations ran at once, over the bound of %d", peak, fairnessSlots)
	}
	if got := testutil.ToFloat64(m.InFlight); got != 0 {
		t.Errorf("portal_admission_evaluations_in_flight = %v after every answer, want 0", got)
	}
}

// startFairnessPortal starts a Portal with fairnessSlots evaluation slots
// whose evaluator is g and whose webhook covers ConfigMaps in namespaces.
func startFairnessPortal(t *testing.T, name string, g *gate, namespaces ...string) *portal {
	t.Helper()
	eng := engine.New(exprlang.New())
	r, err := eng.Compile(&core.Rule{
		Name: "configmaps", Enabled: true, Modes: []core.Mode{core.ModeAdmission},
		EnforcementAction: core.ActionDeny, OnError: core.OnErrorDeny, Expression: "false",
		Match: core.Match{GVKs: []core.GVK{{Version: "v1", Kind: "ConfigMap"}}, Namespaces: core.NamespaceMatch{Include: namespaces}},
	})
	if err != nil {
		t.Fatal(err)
	}
	eng.SetRules([]*engine.Rule{r})
	p, err := startPortal(portalOptions{name: name, logs: &syncWriter{}, evaluator: g, rules: eng, maxConcurrent: fairnessSlots})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-g.open:
		default:
			close(g.open)
		}
		_ = p.stop()
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
		_ = env.client.Delete(context.Background(), vwc)
	})
	waitCovered(t, name, "configmaps", true)
	return p
}

// floodWebhook posts fairnessFlood ConfigMap reviews of namespace ns
// straight to the webhook port at once, as a pod that can reach it could,
// with the API server's longest timeout; each answer that is not an
// admission arrives as an error.
func floodWebhook(t *testing.T, port int, ns string) <-chan error {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: env.cert.pool}}}
	t.Cleanup(hc.CloseIdleConnections)
	answers := make(chan error, fairnessFlood)
	for i := range fairnessFlood {
		body := reviewFor(fmt.Sprintf("flood-%d", i), "CREATE", "", "v1", "ConfigMap", ns,
			fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a-%d","namespace":%q}}`, i, ns), `null`)
		go func() { answers <- postAllowed(hc, port, body) }()
	}
	return answers
}

func postAllowed(hc *http.Client, port int, body string) error {
	resp, err := hc.Post(admission.LocalURL(port)+"?timeout=30s", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(data, &out); err != nil || out.Response == nil || !out.Response.Allowed {
		return fmt.Errorf("flood request: HTTP %d %s; want admitted", resp.StatusCode, data)
	}
	return nil
}

// releaseUntil lets g's held evaluations finish one at a time, each time
// waiting until the freed slot went to the next request, until an
// evaluation of namespace ns has started; it returns how many of g's held
// namespace started before it.
func releaseUntil(t *testing.T, g *gate, ns string) int {
	t.Helper()
	for range fairnessFlood {
		started, _, _ := g.state()
		if i := indexOf(started, ns); i >= 0 {
			return i
		}
		g.release <- struct{}{}
		eventually(t, "the freed slot taken", func() bool {
			now, _, _ := g.state()
			return len(now) > len(started)
		})
	}
	started, _, _ := g.state()
	if i := indexOf(started, ns); i >= 0 {
		return i
	}
	t.Fatalf("%s's request was not evaluated after %d of the flood's", ns, len(started))
	return 0
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
