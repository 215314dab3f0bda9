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

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/forward"
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
	logs *syncBuffer
	port int
}

// TestForwardedVerdictsActOnceOnTheLeader runs two replicas of Portal with
// admission and the actions against one API server. A verdict decided on
// the replica that does not lead is acted on by the leader, once, and
// nothing is dropped; the same forwarded verdict posted twice acts once;
// the endpoint refuses callers without Portal's ServiceAccount token.
func TestForwardedVerdictsActOnceOnTheLeader(t *testing.T) {
	ctx := context.Background()
	cl := shared.Cluster(t)
	c := clusterClient(t, cl, fwdPortal, fwdTenant)
	for _, sa := range []string{"portal", "intruder"} {
		must(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: fwdPortal, Name: sa}}))
	}
	token, intruder := saToken(t, cl, fwdPortal, "portal"), saToken(t, cl, fwdPortal, "intruder")
	tokenFile := filepath.Join(t.TempDir(), "token")
	must(t, os.WriteFile(tokenFile, []byte(token), 0o600))
	rules := t.TempDir()
	must(t, os.WriteFile(filepath.Join(rules, "deny.yaml"), []byte(fwdRule), 0o600))
	t.Cleanup(func() {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "fwd"}}
		if err := c.Delete(context.Background(), vwc); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})

	// The leader starts alone, so it leads; the forwarding URL is its
	// port, as a Service selecting the leader's pod would be.
	leader := startFwdReplica(t, cl, rules, tokenFile, 0)
	e := &verdictEnv{t: t, c: c, logs: leader.logs, port: leader.port}
	e.poll("the leader holding the lease", func() bool {
		l := &coordinationv1.Lease{}
		err := c.Get(ctx, client.ObjectKey{Namespace: fwdPortal, Name: "fwd-leader"}, l)
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
	})
	follower := startFwdReplica(t, cl, rules, tokenFile, leader.port)

	// A review decided on the follower (posted straight to its webhook
	// port, as the API server would when the webhook Service picks it).
	pod := e.pod(fwdTenant, "offender", nil)
	ef := &verdictEnv{t: t, c: c, logs: follower.logs, port: follower.port}
	if resp := ef.forge("fwd-1", fwdTenant, "offender", string(pod.UID)); resp.Allowed {
		t.Fatalf("review admitted on the follower: %+v", resp)
	}
	e.poll("the leader labelling the offender", func() bool {
		p := &corev1.Pod{}
		return c.Get(ctx, client.ObjectKeyFromObject(pod), p) == nil && p.Labels["portal.io/flagged"] == "true"
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
	if n := gauge0(t, follower.reg, "portal_verdicts_forwarded_total", "result", forward.SentAccepted); n != 1 {
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
	if got := gauge0(t, leader.reg, "portal_verdicts_forward_received_total", "result", forward.ReceivedDuplicate); got != 1 {
		t.Errorf("duplicates received: %v, want 1", got)
	}

	// Callers without Portal's ServiceAccount token are refused before
	// anything is read.
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
	if got := gauge0(t, leader.reg, "portal_verdicts_forward_refused_total", "reason", forward.RefusedForbidden); got != 1 {
		t.Errorf("refused as forbidden: %v, want 1", got)
	}
	if got := gauge0(t, leader.reg, "portal_verdicts_forward_received_total", "result", forward.ReceivedAccepted); got != 2 {
		t.Errorf("verdicts accepted by the leader: %v, want 2 (the follower's and the replayed one)", got)
	}
}

// startFwdReplica runs a replica with leader election, forwarding its
// verdicts to leaderPort (none when 0) and accepting those of the
// "portal" ServiceAccount.
func startFwdReplica(t *testing.T, cl *devcluster.Cluster, rules, tokenFile string, leaderPort int) fwdReplica {
	t.Helper()
	cfg, reg, port := layerConfig(t, "fwd")
	cfg.Namespace = fwdPortal
	cfg.LeaderElection = true
	cfg.LeaderElectionID = "fwd-leader"
	cfg.Admission.Enabled = true
	cfg.Actions.Enabled = true
	cfg.Actions.Types = []string{"label"}
	cfg.RulesFolder = rules
	cfg.Actions.Forward.ServiceAccount = "portal"
	cfg.Actions.Forward.TokenFile = tokenFile
	if leaderPort != 0 {
		cfg.Actions.Forward.URL = fmt.Sprintf("https://127.0.0.1:%d%s", leaderPort, forward.Path)
	} else {
		// The leader's own URL: it never forwards while it leads.
		cfg.Actions.Forward.URL = fmt.Sprintf("https://127.0.0.1:%d%s", port, forward.Path)
	}
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	runUntilReady(t, cl, cfg)
	return fwdReplica{reg: reg, logs: logs, port: port}
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

// gauge0 is the value of the counter or gauge series of name in reg with
// label l=v.
func gauge0(t *testing.T, reg *prometheus.Registry, name, l, v string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == l && lp.GetValue() == v {
					return metricValue(m)
				}
			}
		}
	}
	return 0
}
