package actions

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func init() { Register("evict", func(env Env) Action { return &evict{env: env} }) }

// evict evicts a Pod through the Eviction API (policy/v1), so
// PodDisruptionBudgets are respected: a refusal (429) is reported as
// blocked and not retried in a loop; the next change of the pod's findings
// tries again, within the rate limit. minHealthyReplicas refuses an
// eviction that would leave the pod's workload with fewer ready pods.
type evict struct{ env Env }

func (*evict) Destructive() bool { return true }

func (a *evict) Apply(ctx context.Context, req *Request) (Outcome, error) {
	if req.Object.Kind != "Pod" || req.Object.APIVersion != "v1" {
		return outcome(ResultSkipped, "evict acts on Pods, not %s", req.Object.Kind), nil
	}
	pod := &corev1.Pod{}
	if err := a.env.Reader.Get(ctx, client.ObjectKey{Namespace: req.Object.Namespace, Name: req.Object.Name}, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return gone(req), nil
		}
		return Outcome{}, fmt.Errorf("get pod: %w", err)
	}
	if o, ok := req.reviewed(pod.UID); !ok {
		return o, nil
	}
	if min := req.Param("minHealthyReplicas"); min != "" {
		if o, blocked, err := a.guard(ctx, pod, min); err != nil || blocked {
			return o, err
		}
	}
	// The precondition makes the API server refuse to evict a pod that
	// replaced the one read above, or the one an admission verdict
	// reviewed.
	uid := types.UID(cmpOr(req.reviewedUID(), string(pod.UID)))
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}}
	// One request, no client-side retry: a refusal is reported, not
	// waited out.
	err := a.env.Policy.Post().AbsPath("/api/v1").Namespace(pod.Namespace).Resource("pods").Name(pod.Name).
		SubResource("eviction").Body(ev).MaxRetries(0).Do(ctx).Error()
	switch {
	case err == nil:
		return outcome(ResultSuccess, "evicted %s", target(req.Object)), nil
	case apierrors.IsTooManyRequests(err):
		return outcome(ResultBlocked, "eviction of %s refused: %v", target(req.Object), err), nil
	case req.reviewedUID() != "" && apierrors.IsConflict(err):
		return replaced(req), nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// The precondition failed: the pod read above was replaced.
		return outcome(ResultSkipped, "%s is gone", target(req.Object)), nil
	}
	return Outcome{}, fmt.Errorf("evict %s: %w", target(req.Object), err)
}

// guard counts the ready pods of the pod's controlling owner and blocks
// when evicting this one would leave fewer than min.
func (a *evict) guard(ctx context.Context, pod *corev1.Pod, min string) (Outcome, bool, error) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil {
		return Outcome{}, false, nil // a bare pod has no workload to keep up.
	}
	need, err := a.required(ctx, pod.Namespace, owner, min)
	if err != nil {
		return Outcome{}, false, err
	}
	pods := &corev1.PodList{}
	if err := a.env.Reader.List(ctx, pods, client.InNamespace(pod.Namespace)); err != nil {
		return Outcome{}, false, fmt.Errorf("list pods: %w", err)
	}
	ready := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if c := metav1.GetControllerOf(p); c != nil && c.UID == owner.UID && p.DeletionTimestamp == nil && podReady(p) {
			ready++
		}
	}
	after := ready
	if podReady(pod) {
		after--
	}
	if after < need {
		return outcome(ResultBlocked, "evicting %s/%s would leave %s %s with %d ready pods, below minHealthyReplicas %s (%d)",
			pod.Namespace, pod.Name, owner.Kind, owner.Name, after, min, need), true, nil
	}
	return Outcome{}, false, nil
}

// required turns minHealthyReplicas into a count: a percentage is of the
// owner's spec.replicas, rounded up.
func (a *evict) required(ctx context.Context, ns string, owner *metav1.OwnerReference, min string) (int, error) {
	pct, isPct := strings.CutSuffix(min, "%")
	n, err := strconv.Atoi(pct)
	if err != nil {
		return 0, fmt.Errorf("minHealthyReplicas %q is not a count or a percentage", min)
	}
	if !isPct {
		return n, nil
	}
	o := &unstructured.Unstructured{}
	o.SetAPIVersion(owner.APIVersion)
	o.SetKind(owner.Kind)
	if err := a.env.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: owner.Name}, o); err != nil {
		return 0, fmt.Errorf("get %s %s/%s for minHealthyReplicas: %w", owner.Kind, ns, owner.Name, err)
	}
	replicas, found, _ := unstructured.NestedInt64(o.Object, "spec", "replicas")
	if !found {
		replicas = 1
	}
	return int(math.Ceil(float64(replicas) * float64(n) / 100)), nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (*evict) Permissions() []authorizationv1.ResourceAttributes {
	return []authorizationv1.ResourceAttributes{
		{Verb: "create", Resource: "pods", Subresource: "eviction"},
		{Verb: "get", Resource: "pods"}, {Verb: "list", Resource: "pods"},
	}
}
