package clustercache

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	"github.com/vilaca/portal/internal/devcluster/devtest"
)

var configMaps = corev1.SchemeGroupVersion.WithResource("configmaps")

// watchCount counts the watch requests for configmaps a config makes.
func watchCount(cfg *rest.Config) (*rest.Config, *atomic.Int64) {
	n := new(atomic.Int64)
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return &requestCounter{next: next, fn: func(r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/configmaps") && r.URL.Query().Get("watch") == "true" {
				n.Add(1)
			}
		}}
	})
	return cfg, n
}

// Two consumers of one resource share one informer and one watch; the
// informer stops when the last releases it, and a later Acquire starts a new
// one that lists again.
func TestReferenceCounting(t *testing.T) {
	ns := namespace(t, "refs")
	createConfigMap(t, ns, "a", nil)
	cfg, watches := watchCount(shared.Cluster(t).Config)
	c, _ := startCache(t, cfg)
	scope := Scope{Resource: configMaps, Namespace: ns}

	audit, err := c.Acquire(scope)
	if err != nil {
		t.Fatal(err)
	}
	lookups, err := c.Acquire(scope)
	if err != nil {
		t.Fatal(err)
	}
	waitSynced(t, audit)
	waitSynced(t, lookups)
	if got := c.Scopes(); !slices.Equal(got, []Scope{scope}) {
		t.Fatalf("scopes = %v, want one informer for both consumers", got)
	}
	if n := testutil.ToFloat64(c.metrics.users.WithLabelValues("configmaps", "namespace")); n != 2 {
		t.Errorf("portal_cluster_cache_users = %v, want 2", n)
	}
	if n := watches.Load(); n != 1 {
		t.Errorf("%d watch requests for two consumers, want 1", n)
	}
	if n := testutil.ToFloat64(c.metrics.watches.WithLabelValues("configmaps")); n != 1 {
		t.Errorf("portal_cluster_cache_watches_total = %v, want 1", n)
	}
	// Counted once, however many consumers hold it.
	devtest.Eventually(t, "one object counted", func() bool {
		return testutil.ToFloat64(c.metrics.objects.WithLabelValues("configmaps")) == 1 &&
			testutil.ToFloat64(c.metrics.bytes.WithLabelValues("configmaps")) > 0
	})

	audit.Release()
	audit.Release() // twice is harmless
	if _, ok, err := lookups.Get(ns, "a"); err != nil || !ok {
		t.Fatalf("the other consumer lost its cache: %v, %v", ok, err)
	}
	lookups.Release()
	if got := c.Scopes(); len(got) != 0 {
		t.Fatalf("scopes after the last release = %v, want none", got)
	}
	if _, _, err := c.Get(configMaps, ns, "a"); !errors.Is(err, ErrNotWatched) {
		t.Errorf("read of a released resource: %v, want ErrNotWatched", err)
	}
	if n := testutil.ToFloat64(c.metrics.informers.WithLabelValues("configmaps", "namespace")); n != 0 {
		t.Errorf("portal_cluster_cache_informers = %v after the last release", n)
	}
	if n, b := testutil.ToFloat64(c.metrics.objects.WithLabelValues("configmaps")), testutil.ToFloat64(c.metrics.bytes.WithLabelValues("configmaps")); n != 0 || b != 0 {
		t.Errorf("size gauges after the last release: %v objects, %v bytes", n, b)
	}

	// Created while nothing watched: a new informer lists it.
	createConfigMap(t, ns, "b", nil)
	again, err := c.Acquire(scope)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Release()
	waitSynced(t, again)
	if _, ok, err := again.Get(ns, "b"); err != nil || !ok {
		t.Errorf("re-acquired informer does not have b: %v, %v", ok, err)
	}
	if n := watches.Load(); n != 2 {
		t.Errorf("%d watch requests after re-acquiring, want 2", n)
	}
}

// Listers read by namespace and label selector, from a cluster-wide or a
// namespaced informer, and never outside the scope acquired.
func TestListers(t *testing.T) {
	nsA, nsB := namespace(t, "list-a"), namespace(t, "list-b")
	for _, ns := range []string{nsA, nsB} {
		createConfigMap(t, ns, "web", map[string]string{"app": "web", "tier": "front"})
		createConfigMap(t, ns, "db", map[string]string{"app": "db"})
		createConfigMap(t, ns, "plain", nil)
	}
	c, _ := startCache(t, nil)
	all, err := c.Acquire(Scope{Resource: configMaps})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Release()
	onlyB, err := c.Acquire(Scope{Resource: configMaps, Namespace: nsB})
	if err != nil {
		t.Fatal(err)
	}
	defer onlyB.Release()
	waitSynced(t, all)
	waitSynced(t, onlyB)

	sel, err := labels.Parse("app in (web,db)")
	if err != nil {
		t.Fatal(err)
	}
	got, err := all.List(nsA, sel)
	if err != nil {
		t.Fatal(err)
	}
	if keys := keysOf(got); !slices.Equal(keys, []string{nsA + "/db", nsA + "/web"}) {
		t.Errorf("List(%s, %s) = %v", nsA, sel, keys)
	}
	front := labels.SelectorFromSet(labels.Set{"tier": "front"})
	got, err = c.List(configMaps, "", front)
	if err != nil {
		t.Fatal(err)
	}
	if keys := keysOf(got); !slices.Equal(keys, []string{nsA + "/web", nsB + "/web"}) {
		t.Errorf("List(all, %s) = %v", front, keys)
	}
	if data, _, _ := unstructured.NestedString(got[0].Object, "data", "k"); data != "web" {
		t.Errorf("decoded data = %q", data)
	}
	got, err = onlyB.List(nsA, nil)
	if err != nil || len(got) != 0 {
		t.Errorf("namespaced handle listed another namespace: %v, %v", keysOf(got), err)
	}
	got, err = onlyB.List("", nil)
	if keys := keysOf(got); err != nil || len(keys) != 3 || !strings.HasPrefix(keys[0], nsB+"/") {
		t.Errorf("namespaced handle List(\"\") = %v, %v", keys, err)
	}
	obj, ok, err := c.Get(configMaps, nsB, "db")
	if err != nil || !ok || obj.GetLabels()["app"] != "db" {
		t.Errorf("Get = %v, %v, %v", obj, ok, err)
	}
	if _, ok, err := c.Get(configMaps, nsB, "missing"); ok || err != nil {
		t.Errorf("Get(missing) = %v, %v", ok, err)
	}
	// The decoded object is the caller's own.
	obj.SetLabels(nil)
	if again, _, _ := c.Get(configMaps, nsB, "db"); again.GetLabels()["app"] != "db" {
		t.Error("a caller's change reached the cache")
	}
	res, err := c.Resolve("configmaps")
	if err != nil || res.GVR != configMaps || !res.Namespaced || res.GVK.Kind != "ConfigMap" {
		t.Errorf("Resolve(configmaps) = %+v, %v", res, err)
	}
	if res, err := c.Resolve("deployments.apps"); err != nil || res.GVR.Group != "apps" || res.GVR.Version != "v1" {
		t.Errorf("Resolve(deployments.apps) = %+v, %v", res, err)
	}
	if _, err := c.Resolve("nosuchthings"); err == nil {
		t.Error("Resolve of an unknown resource succeeded")
	}
	if _, err := c.Acquire(Scope{Resource: corev1.SchemeGroupVersion.WithResource("namespaces"), Namespace: nsA}); err == nil {
		t.Error("a cluster-scoped resource was acquired in a namespace")
	}
}

// Subscribers see adds, updates and deletes; one that blocks delays no
// other.
func TestSubscriptions(t *testing.T) {
	ns := namespace(t, "subs")
	createConfigMap(t, ns, "before", nil)
	c, _ := startCache(t, nil)
	h, err := c.Acquire(Scope{Resource: configMaps, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()

	block := make(chan struct{})
	defer close(block)
	var blocked atomic.Int64
	if _, err := h.Subscribe(func(Event) {
		blocked.Add(1)
		<-block
	}, SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	sub, err := h.Subscribe(func(e Event) {
		line := string(e.Type) + " " + e.Key.Name
		if e.Type == Updated {
			line += " " + e.Old.GetResourceVersion() + "->" + e.New.GetResourceVersion()
		}
		if e.Type == Deleted && e.Old == nil {
			line += " without its last state"
		}
		mu.Lock()
		seen = append(seen, line)
		mu.Unlock()
	}, SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !sub.WaitSynced(context.Background(), 30*time.Second) {
		t.Fatal("subscriber did not receive the initial list")
	}
	saw := func(want string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.ContainsFunc(seen, func(s string) bool { return strings.HasPrefix(s, want) })
		}
	}
	devtest.Eventually(t, "initial add", saw("add before"))
	cs := clientset(t).CoreV1().ConfigMaps(ns)
	cm := createConfigMap(t, ns, "later", nil)
	devtest.Eventually(t, "add", saw("add later"))
	cm.Data = map[string]string{"k": "changed"}
	updated, err := cs.Update(context.Background(), cm, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	devtest.Eventually(t, "update", saw("update later "+cm.ResourceVersion+"->"+updated.ResourceVersion))
	if err := cs.Delete(context.Background(), "later", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	devtest.Eventually(t, "delete", saw("delete later"))
	if saw("delete later without")() {
		t.Error("delete without the object's last state")
	}
	// After Unsubscribe, no more events.
	sub.Unsubscribe()
	mu.Lock()
	before := len(seen)
	mu.Unlock()
	createConfigMap(t, ns, "unseen", nil)
	devtest.Eventually(t, "the informer has the new object", func() bool {
		_, ok := h.Object(ns, "unseen")
		return ok
	})
	probe, err := h.Subscribe(func(Event) {}, SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A later subscriber synced: the informer delivered everything up to
	// "unseen" to its listeners, and the unsubscribed one got none of it.
	if !probe.WaitSynced(context.Background(), 30*time.Second) {
		t.Fatal("probe did not sync")
	}
	mu.Lock()
	after := len(seen)
	mu.Unlock()
	if after != before {
		t.Errorf("an unsubscribed handler saw %d more events", after-before)
	}
	if n := blocked.Load(); n != 1 {
		t.Errorf("blocked subscriber ran %d times, want 1 (it is still blocked)", n)
	}
	// The informer itself kept going: its store has the update.
	if _, ok := h.Object(ns, "later"); ok {
		t.Error("deleted object still cached")
	}
}

// A resource Portal may not list reports a clear, typed error and blocks
// neither the consumers of other resources nor the cache.
func TestForbiddenResource(t *testing.T) {
	ns := namespace(t, "rbac")
	cs := clientset(t)
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cache"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list", "watch"}}},
	}
	if _, err := cs.RbacV1().Roles(ns).Create(context.Background(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cache"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "cache"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "cache-user"}},
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(context.Background(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(shared.Cluster(t).Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "cache-user"}
	c, reg := startCache(t, cfg)

	secrets, err := c.Acquire(Scope{Resource: corev1.SchemeGroupVersion.WithResource("secrets"), Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer secrets.Release()
	cms, err := c.Acquire(Scope{Resource: configMaps, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer cms.Release()
	var added atomic.Int64
	if _, err := cms.Subscribe(func(e Event) {
		if e.Type == Added {
			added.Add(1)
		}
	}, SubscribeOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSynced(t, cms)
	createConfigMap(t, ns, "allowed", nil)
	devtest.Eventually(t, "configmap event despite the forbidden secrets", func() bool { return added.Load() == 1 })

	err = secrets.WaitSynced(context.Background(), 3*time.Second)
	if !errors.Is(err, ErrNotSynced) || !isForbidden(err) {
		t.Fatalf("WaitSynced on a forbidden resource = %v, want ErrNotSynced wrapping Forbidden", err)
	}
	if !strings.Contains(err.Error(), "secrets") {
		t.Errorf("error does not name the resource: %v", err)
	}
	if !isForbidden(secrets.Err()) {
		t.Errorf("Err() = %v, want Forbidden", secrets.Err())
	}
	if _, _, err := c.Get(corev1.SchemeGroupVersion.WithResource("secrets"), ns, "x"); !errors.Is(err, ErrNotSynced) {
		t.Errorf("read of a forbidden resource = %v, want ErrNotSynced", err)
	}
	devtest.Eventually(t, "forbidden counted", func() bool {
		return testutil.ToFloat64(c.metrics.watchErrors.WithLabelValues("secrets", "forbidden")) > 0
	})
	if n, err := testutil.GatherAndCount(reg, "portal_cluster_cache_watch_errors_total"); err != nil || n == 0 {
		t.Errorf("watch errors not exported: %d, %v", n, err)
	}
}

// isForbidden reports whether a Forbidden API error is in err's chain.
func isForbidden(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status) && apierrors.IsForbidden(status.(error))
}

func keysOf(objs []*unstructured.Unstructured) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.GetNamespace() + "/" + o.GetName()
	}
	return out
}
