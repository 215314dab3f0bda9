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
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/forward"
	"github.com/vilaca/portal/internal/testlog"
)

const (
	fwdPortal = "fwd-portal"
	fwdTenant = "fwd-tenant"
)

// fwdRule denies a pod labelled bad=yes and labels it.
const fwdRule = `name: fwd-deny-bad
severity: high
mode: [admission]
enforcementAction: deny
match: {gvk: [{kind: Pod}], namespaces: {include: [fwd-tenant]}}
rule: object.metadata.labels?.bad == "yes"
message: bad pod
actions:
  - {type: label, key: portal.io/flagged, value: "true"}
`

// fwdReplica is one Portal replica of the forwarding tests.
type fwdReplica struct {
	reg  *prometheus.Registry
	logs *testlog.Buffer
	port int
	stop func()
}

// TestForwardedVerdictsActOnceOnTheLeader runs two replicas of Portal with
// admission and the actions against one API server. A verdict decided on
// the replica that does not lead is acted on by the leader, once, and
// nothing is dropped; the same forwarded verdict posted twice acts once;
// the endpoint refuses callers without Portal's ServiceAccount token.
func TestForwardedVerdictsActOnceOnTheLeader(t *testing.T) {
	ctx := context.Background()
	f := fwdSetup(t, "fwd")
	c, token, intruder := f.c, f.token, saToken(t, f.cl, fwdPortal, "intruder")

	// A tenant's rule: its verdicts may only ever act in its namespace.
	tenantRule := &policyv1alpha1.PortalRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: fwdTenant, Name: "tenant-flag"},
		Spec: policyv1alpha1.RuleSpec{
			Mode:    []policyv1alpha1.Mode{"admission"},
			Match:   policyv1alpha1.Match{GVK: []policyv1alpha1.GroupVersionKind{{Version: "v1", Kind: "Pod"}}},
			Rule:    `object.metadata.labels?.tenantbad == "yes"`,
			Actions: []policyv1alpha1.Action{{Type: "label", Key: "portal.io/flagged", Value: "true"}},
		},
	}
	must(t, c.Create(ctx, tenantRule))
	t.Cleanup(func() { _ = c.Delete(context.Background(), tenantRule) })

	// The leader starts alone, so it leads; the forwarding URL is its
	// port, as a Service selecting the leader's pod would be.
	leader := startFwdReplica(t, f, 0)
	e := &verdictEnv{t: t, c: c, logs: leader.logs, port: leader.port}
	f.waitLeader(e)
	follower := startFwdReplica(t, f, leader.port)
	waitServing(e, follower.port)

	// A review decided on the follower (posted straight to its webhook
	// port, as the API server would when the webhook Service picks it).
	pod := e.pod(fwdTenant, "offender", nil)
	ef := &verdictEnv{t: t, c: c, logs: follower.logs, port: follower.port}
	if resp := ef.forge("fwd-1", fwdTenant, "offender", string(pod.UID)); resp.Allowed {
		t.Fatalf("review admitted on the follower: %+v", resp)
	}
	// The action's audit line follows the label: wait for both.
	e.poll("the leader labelling the offender", func() bool {
		p := &corev1.Pod{}
		return c.Get(ctx, client.ObjectKeyFromObject(pod), p) == nil && p.Labels["portal.io/flagged"] == "true" &&
			e.results("label", "offender") != ""
	})
	if got := e.results("label", "offender"); got != "success" {
		t.Errorf("label on the offender by the leader: %q, want one success", got)
	}
	if got := ef.results("label", "offender"); got != "" {
		t.Errorf("the follower acted itself: %q", got)
	}
	if n := counter(t, follower.reg, "portal_actions_dropped_total"); n != 0 {
		t.Errorf("the follower dropped %v verdicts", n)
	}
	// The follower counts the verdict once the leader's answer is back,
	// which can be after the leader acted.
	e.poll("the follower counting the verdict forwarded", func() bool {
		return gauge(t, follower.reg, "portal_verdicts_forwarded_total", "result", forward.SentAccepted) >= 1
	})
	if n := gauge(t, follower.reg, "portal_verdicts_forwarded_total", "result", forward.SentAccepted); n != 1 {
		t.Errorf("the follower forwarded %v verdicts, want 1", n)
	}

	// One forwarded verdict delivered twice (a retry whose answer was
	// lost) acts once.
	replayed := e.pod(fwdTenant, "replayed", nil)
	batch := forward.Batch{Verdicts: []forward.Verdict{{
		ID: "retried-verdict", Rule: forward.RuleRef{Kind: "file", Name: "fwd-deny-bad"},
		Resource: core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: fwdTenant, Name: "replayed", UID: string(replayed.UID)},
		Message:  "bad pod", Operation: "UPDATE", Denied: true, Observed: time.Now(),
	}}}
	for range 2 {
		if code := postForward(t, leader.port, token, batch); code != http.StatusOK {
			t.Fatalf("forwarded batch: HTTP %d", code)
		}
	}
	e.poll("the leader labelling the replayed pod", func() bool { return e.results("label", "replayed") != "" })
	if got := gauge(t, leader.reg, "portal_verdicts_forward_received_total", "result", forward.ReceivedDuplicate); got != 1 {
		t.Errorf("duplicates received: %v, want 1", got)
	}

	fwdOwnRulesOnly(t, e, leader, token)
	fwdRefusesStrangers(t, leader, intruder, batch)
	if got := gauge(t, leader.reg, "portal_verdicts_forward_received_total", "result", forward.ReceivedAccepted); got != 2 {
		t.Errorf("verdicts accepted by the leader: %v, want 2 (the follower's and the replayed one)", got)
	}
}

// fwdOwnRulesOnly: the wire names a rule; the leader acts only through one
// it holds, and never on a PortalRule's verdict about another namespace.
func fwdOwnRulesOnly(t *testing.T, e *verdictEnv, leader fwdReplica, token string) {
	t.Helper()
	ctx := context.Background()
	bystander := e.pod(fwdPortal, "bystander", nil)
	forged := forward.Batch{Verdicts: []forward.Verdict{
		{ID: "no-such-rule", Rule: forward.RuleRef{Kind: "file", Name: "no-such-rule"},
			Resource: core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: fwdPortal, Name: "bystander", UID: string(bystander.UID)}},
		{ID: "cross-namespace", Rule: forward.RuleRef{Kind: "PortalRule", Namespace: fwdTenant, Name: "tenant-flag"},
			Resource: core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: fwdPortal, Name: "bystander", UID: string(bystander.UID)}},
	}}
	if code := postForward(t, leader.port, token, forged); code != http.StatusOK {
		t.Fatalf("forged batch: HTTP %d", code)
	}
	for result, want := range map[string]float64{forward.ReceivedUnknownRule: 1, forward.ReceivedOutOfNamespace: 1} {
		if got := gauge(t, leader.reg, "portal_verdicts_forward_received_total", "result", result); got != want {
			t.Errorf("received %s: %v, want %v", result, got, want)
		}
	}

	// Posted synchronously: what the leader did not queue it never acts on.
	if got := e.results("label", "bystander"); got != "" {
		t.Errorf("the leader acted on the bystander: %q", got)
	}
	p := &corev1.Pod{}
	must(t, e.c.Get(ctx, client.ObjectKeyFromObject(bystander), p))
	if p.Labels["portal.io/flagged"] != "" {
		t.Errorf("the bystander was labelled: %v", p.Labels)
	}
}

// fwdRefusesStrangers: callers without Portal's ServiceAccount token are
// refused before anything is read.
func fwdRefusesStrangers(t *testing.T, leader fwdReplica, intruder string, batch forward.Batch) {
	t.Helper()
	for _, tc := range []struct {
		name, token string
		code        int
	}{{"no token", "", http.StatusUnauthorized}, {"a forged token", "not-a-token", http.StatusUnauthorized}, {"another ServiceAccount", intruder, http.StatusForbidden}} {
		victim := batch
		victim.Verdicts = []forward.Verdict{batch.Verdicts[0]}
		victim.Verdicts[0].ID = "intruder-" + strings.ReplaceAll(tc.name, " ", "-")
		if code := postForward(t, leader.port, tc.token, victim); code != tc.code {
			t.Errorf("%s: HTTP %d, want %d", tc.name, code, tc.code)
		}
	}
	if got := gauge(t, leader.reg, "portal_verdicts_forward_refused_total", "reason", forward.RefusedForbidden); got != 1 {
		t.Errorf("refused as forbidden: %v, want 1", got)
	}
}

// fwdEnv is what the replicas of one forwarding test share.
type fwdEnv struct {
	name      string
	cl        *devcluster.Cluster
	c         client.Client
	token     string
	tokenFile string
	rules     string
}

// fwdSetup makes Portal's ServiceAccounts, a token of "portal" for the
// replicas to forward with, and the rules; name names the webhook
// configuration and the lease.
func fwdSetup(t *testing.T, name string) *fwdEnv {
	t.Helper()
	ctx := context.Background()
	cl := shared.Cluster(t)
	c := clusterClient(t, cl, fwdPortal, fwdTenant)
	for _, sa := range []string{"portal", "intruder"} {
		err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: fwdPortal, Name: sa}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	f := &fwdEnv{name: name, cl: cl, c: c, token: saToken(t, cl, fwdPortal, "portal"), rules: t.TempDir()}
	f.tokenFile = filepath.Join(t.TempDir(), "token")
	must(t, os.WriteFile(f.tokenFile, []byte(f.token), 0o600))
	must(t, os.WriteFile(filepath.Join(f.rules, "deny.yaml"), []byte(fwdRule), 0o600))
	// Registered first, so it runs once the replicas have stopped.
	t.Cleanup(func() {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Delete(context.Background(), vwc); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
	return f
}

// waitLeader waits until a replica holds the lease.
func (f *fwdEnv) waitLeader(e *verdictEnv) {
	e.poll("a replica holding the lease", func() bool {
		l := &coordinationv1.Lease{}
		err := f.c.Get(context.Background(), client.ObjectKey{Namespace: fwdPortal, Name: f.name + "-leader"}, l)
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
	})
}

// startFwdReplica runs a replica with leader election, forwarding its
// verdicts to leaderPort (its own port when 0) and accepting those of the
// "portal" ServiceAccount; opts change its configuration further.
func startFwdReplica(t *testing.T, f *fwdEnv, leaderPort int, opts ...func(*Config)) fwdReplica {
	t.Helper()
	cfg, reg, port := layerConfig(t, f.name)
	cfg.Namespace = fwdPortal
	cfg.LeaderElection = true
	cfg.LeaderElectionID = f.name + "-leader"
	cfg.Admission.Enabled = true
	cfg.Actions.Enabled = true
	cfg.Actions.Types = []string{"label"}
	cfg.RulesFolder = f.rules
	cfg.Actions.Forward.ServiceAccount = "portal"
	cfg.Actions.Forward.TokenFile = f.tokenFile
	if leaderPort == 0 {
		leaderPort = port // it never forwards while it leads
	}
	cfg.Actions.Forward.URL = fmt.Sprintf("https://127.0.0.1:%d%s", leaderPort, forward.Path)
	logs := &testlog.Buffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	for _, o := range opts {
		o(&cfg)
	}
	stop := runStoppable(t, f.cl, cfg)
	return fwdReplica{reg: reg, logs: logs, port: port, stop: stop}
}

// runStoppable is runUntilReady with a stop the test may call earlier.
func runStoppable(t *testing.T, cl *devcluster.Cluster, cfg Config) func() {
	t.Helper()
	ready := make(chan struct{})
	cfg.OnReady = func() { close(ready) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cl.Config, cfg) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("manager: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case <-ready:
	case <-time.After(time.Minute):
		t.Fatal("manager not ready within a minute")
	case err := <-done:
		t.Fatalf("manager stopped before ready: %v", err)
	}
	return stop
}

// TestForwardedVerdictsSurviveALeaderChange: the leader stops; a verdict
// decided meanwhile on the other replica, which it forwards to the leader
// that is gone, is acted on once that replica takes the lease, once, and
// nothing is dropped.
func TestForwardedVerdictsSurviveALeaderChange(t *testing.T) {
	ctx := context.Background()
	f := fwdSetup(t, "fwd-failover")
	old := startFwdReplica(t, f, 0)
	e := &verdictEnv{t: t, c: f.c, logs: old.logs, port: old.port}
	f.waitLeader(e)
	next := startFwdReplica(t, f, old.port)
	pod := e.pod(fwdTenant, "during-failover", nil)
	en := &verdictEnv{t: t, c: f.c, logs: next.logs, port: next.port}
	waitServing(en, next.port)

	old.stop()
	if resp := en.forge("fwd-failover-1", fwdTenant, "during-failover", string(pod.UID)); resp.Allowed {
		t.Fatalf("review admitted: %+v", resp)
	}
	// The action's audit line follows the label: wait for both.
	en.poll("the new leader labelling the pod", func() bool {
		p := &corev1.Pod{}
		return f.c.Get(ctx, client.ObjectKeyFromObject(pod), p) == nil && p.Labels["portal.io/flagged"] == "true" &&
			en.results("label", "during-failover") != ""
	})
	if got := en.results("label", "during-failover"); got != "success" {
		t.Errorf("label by the new leader: %q, want one success", got)
	}
	if got := e.results("label", "during-failover"); got != "" {
		t.Errorf("the old leader acted too: %q", got)
	}
	for _, m := range []string{"portal_actions_dropped_total", "portal_verdicts_forward_dropped_total"} {
		if n := counter(t, next.reg, m); n != 0 {
			t.Errorf("%s = %v on the new leader", m, n)
		}
	}
	if n := gauge(t, next.reg, "portal_verdicts_forwarded_total", "result", forward.SentFailed); n != 0 {
		t.Errorf("%v verdicts given up", n)
	}
	t.Logf("the verdict was %v handed over, %v sent", gauge(t, next.reg, "portal_verdicts_forwarded_total", "result", forward.SentHandedOver),
		gauge(t, next.reg, "portal_verdicts_forwarded_total", "result", forward.SentAccepted))
}

// waitServing waits until the replica on port serves the webhook
// certificate, which a replica that does not lead reads from the Secret the
// leader writes.
func waitServing(e *verdictEnv, port int) {
	e.t.Helper()
	e.poll(fmt.Sprintf("port %d serving the webhook certificate", port), func() bool {
		conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true})
		if err == nil {
			_ = conn.Close()
		}
		return err == nil
	})
}

// postForward posts batch to the forwarding endpoint on port with token
// ("" sends none) and returns the status code.
func postForward(t *testing.T, port int, token string, batch forward.Batch) int {
	t.Helper()
	body, err := json.Marshal(batch)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("https://127.0.0.1:%d%s", port, forward.Path), strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}

// saToken is a token of the ServiceAccount ns/name.
func saToken(t *testing.T, cl *devcluster.Cluster, ns, name string) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(cl.Config))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrInt64(3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}
