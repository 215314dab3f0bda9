package actions_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// eventSpy passes Events on to the real recorder and notes, as the engine
// asks for them, which objects they are on: Events reach the API server
// asynchronously and in no order, so their absence cannot be read there.
type eventSpy struct {
	events.EventRecorder
	mu sync.Mutex
	on map[string][]string // object name -> reasons
}

func (s *eventSpy) Eventf(regarding, related runtime.Object, typ, reason, action, note string, args ...any) {
	if m, err := meta.Accessor(regarding); err == nil {
		s.mu.Lock()
		if s.on == nil {
			s.on = map[string][]string{}
		}
		s.on[m.GetName()] = append(s.on[m.GetName()], reason)
		s.mu.Unlock()
	}
	s.EventRecorder.Eventf(regarding, related, typ, reason, action, note, args...)
}

func (s *eventSpy) reasons(name string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.on[name]...)
}

// TestAdmissionVerdictActsOnlyOnTheReviewedObject: an admission verdict
// whose UID is not the live object's (a forged review, a refused CREATE
// reusing a live pod's name), or that has no UID, changes nothing: every
// action is skipped, says why, and records no Event on the live object. A
// verdict with the live object's UID runs every action.
func TestAdmissionVerdictActsOnlyOnTheReviewedObject(t *testing.T) {
	ctx := context.Background()
	spy := &eventSpy{}
	e := start(t, func(o *actions.Options) { spy.EventRecorder, o.Recorder = o.Recorder, spy })
	ns := e.namespace("reviewed")
	if err := e.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "app"}},
		Type: corev1.SecretTypeServiceAccountToken}
	if err := e.c.Create(ctx, token); err != nil {
		t.Fatal(err)
	}
	victim := e.pod(ns, "victim", nil, func(p *corev1.Pod) { p.Spec.ServiceAccountName = "app" })
	types := []string{"label", "annotate", "patch-networkpolicy", "revoke-sa-token", "evict"}
	var specs []core.ActionSpec
	for _, typ := range types {
		specs = append(specs, spec(typ, "key", "portal.io/reviewed", "value", "yes"))
	}
	r := clusterRule("reviewed", specs...)
	r.Modes = []core.Mode{core.ModeAdmission}
	sa := clusterRule("reviewed-sa", spec("revoke-sa-token"))
	sa.Modes = r.Modes
	offer := func(r *core.Rule, ref core.ResourceRef) {
		e.eng.Offer(core.Verdict{Result: core.Result{Rule: r, Resource: ref, Outcome: core.OutcomeFail}, Operation: "UPDATE", Denied: true, Observed: time.Now()})
	}
	devtest.Eventually(t, "the engine running", func() bool { return actions.Running(e.eng) })
	t.Cleanup(func() { dump(t, e) })

	forged, noUID := podRef(victim), podRef(victim)
	forged.UID, noUID.UID = "6b1f3c52-0000-4000-8000-000000000000", ""
	offer(r, forged)
	offer(r, noUID)
	offer(sa, core.ResourceRef{APIVersion: "v1", Kind: "ServiceAccount", Namespace: ns, Name: "app", UID: "6b1f3c52-0000-4000-8000-000000000001"})
	devtest.Eventually(t, "every attempt recorded", func() bool {
		for _, typ := range types {
			if len(e.log.lines(typ, "victim")) < 2 {
				return false
			}
		}
		return len(e.log.lines("revoke-sa-token", "app")) == 1
	})
	for _, typ := range types {
		lines := e.log.lines(typ, "victim")
		if got := results(lines); got != "skipped,skipped" {
			t.Errorf("%s on the live pod: results %s, want skipped for both verdicts", typ, got)
			continue
		}
		if d := lines[0]["detail"].(string); !strings.Contains(d, "is not the live Pod reviewed/victim (UID "+string(victim.UID)+")") {
			t.Errorf("%s, forged UID: detail %q does not say the reviewed object is not the live one", typ, d)
		}
		if d := lines[1]["detail"].(string); !strings.Contains(d, "names no object UID") {
			t.Errorf("%s, no UID: detail %q", typ, d)
		}
	}
	for _, typ := range types {
		want := 2.0
		if typ == "revoke-sa-token" {
			want = 3 // and the ServiceAccount's
		}
		if got := e.count(typ, actions.ResultSkipped); got != want {
			t.Errorf("portal_actions_total{action=%q,result=\"skipped\"} = %v, want %v", typ, got, want)
		}
	}
	if d := e.log.lines("revoke-sa-token", "app")[0]; d["result"] != actions.ResultSkipped || !strings.Contains(d["detail"].(string), "is not the live ServiceAccount reviewed/app") {
		t.Errorf("revoke-sa-token on the live ServiceAccount: %v", d)
	}
	untouched(ctx, t, e, victim, token)
	for _, name := range []string{"victim", "app"} {
		if got := spy.reasons(name); len(got) != 0 {
			t.Errorf("Events recorded on the live %s for verdicts about another object: %v", name, got)
		}
	}

	// The verdict about the live pod itself runs every action.
	offer(r, podRef(victim))
	// The pod can be gone before the eviction's own result is logged: wait
	// for both (a CI run read the log in between).
	devtest.Eventually(t, "the pod evicted and every action's result logged", func() bool {
		for _, typ := range types {
			if len(e.log.lines(typ, "victim")) < 3 {
				return false
			}
		}
		return apierrors.IsNotFound(e.c.Get(ctx, client.ObjectKeyFromObject(victim), &corev1.Pod{}))
	})
	for _, typ := range types {
		if got := results(e.log.lines(typ, "victim")); got != "skipped,skipped,success" {
			t.Errorf("%s: results %s, want success for the verdict about the live pod", typ, got)
		}
	}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(token), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the token Secret survived the verdict about the live pod: %v", err)
	}
	if got := spy.reasons("victim"); len(got) != len(types) {
		t.Errorf("Events on the live pod: %v, want one per action", got)
	}
}

// untouched fails unless the pod is still there, unlabelled and
// unannotated, with no quarantine policy, and its token Secret exists.
func untouched(ctx context.Context, t *testing.T, e *env, p *corev1.Pod, token *corev1.Secret) {
	t.Helper()
	got := &corev1.Pod{}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
		t.Fatalf("the live pod is gone: %v", err)
	}
	if got.UID != p.UID || len(got.Labels) != 0 || len(got.Annotations) != 0 {
		t.Errorf("the live pod was changed: uid %s, labels %v, annotations %v", got.UID, got.Labels, got.Annotations)
	}
	nps := &networkingv1.NetworkPolicyList{}
	if err := e.c.List(ctx, nps, client.InNamespace(p.Namespace)); err != nil || len(nps.Items) != 0 {
		t.Errorf("quarantine policies: %v %v", nps.Items, err)
	}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(token), &corev1.Secret{}); err != nil {
		t.Errorf("the token Secret was deleted: %v", err)
	}
}

// TestForgedVerdictsDoNotHoldBackAGenuineOne: verdicts naming other UIDs
// than the live pod's (forged reviews), as many as the action's RateLimit
// and more, the last still queued when the genuine verdict comes, neither
// use up the pod's RateLimit nor make the genuine verdict a duplicate: it
// labels the pod.
func TestForgedVerdictsDoNotHoldBackAGenuineOne(t *testing.T) {
	ctx := context.Background()
	e := start(t, nil)
	ns := e.namespace("forged-limit")
	victim := e.pod(ns, "victim", nil)
	r := clusterRule("forged-limit", spec("label", "key", "portal.io/forged-limit", "value", "yes", "rateLimit", "2/h"))
	r.Modes = []core.Mode{core.ModeAdmission}
	offer := func(uid string) {
		ref := podRef(victim)
		ref.UID = uid
		e.eng.Offer(core.Verdict{Result: core.Result{Rule: r, Resource: ref, Outcome: core.OutcomeFail}, Operation: "UPDATE", Denied: true, Observed: time.Now()})
	}
	devtest.Eventually(t, "the engine running", func() bool { return actions.Running(e.eng) })
	t.Cleanup(func() { dump(t, e) })
	for i := range 2 {
		offer("6b1f3c52-0000-4000-8000-00000000001" + string(rune('0'+i)))
		devtest.Eventually(t, "the forged verdict's attempt", func() bool { return len(e.log.lines("label", "victim")) == i+1 })
	}
	offer("6b1f3c52-0000-4000-8000-000000000019")
	offer(string(victim.UID))
	devtest.Eventually(t, "the genuine verdict's attempt", func() bool { return len(e.log.lines("label", "victim")) == 4 })
	if got := results(e.log.lines("label", "victim")); got != "skipped,skipped,skipped,success" {
		t.Fatalf("results %s, want the three forged verdicts skipped and the genuine one a success", got)
	}
	got := &corev1.Pod{}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(victim), got); err != nil || got.Labels["portal.io/forged-limit"] != "yes" {
		t.Errorf("the pod's labels %v (%v), want portal.io/forged-limit=yes", got.Labels, err)
	}
}
