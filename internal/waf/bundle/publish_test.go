package bundle_test

import (
	"context"
	"encoding/json"
	"io"
	"k8s.io/apimachinery/pkg/types"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/bundle/s3test"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/controller"
)

// publishing runs the RuleSet compiler, status writer and bundle publisher
// against the test control plane, publishing to storage s. The client it
// returns reads the API server, not the manager's cache: a RuleSet just
// created may not be in the cache yet, and a Get from it would say not found.
func publishing(t *testing.T, s *s3test.Storage) (client.Client, *cache.Cache) {
	t.Helper()
	cl := cluster(t)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, wafv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	mgr, err := devtest.NewManager(cl, scheme)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := controller.SetupIndexes(context.Background(), mgr); err != nil {
		t.Fatal(err)
	}
	c := cache.New(nil, nil)
	comp := controller.NewCompiler(mgr.GetCache(), c, log, nil, controller.CompilerOptions{})
	if err := comp.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	if err := controller.NewStatusWriter(mgr.GetClient(), comp, nil).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	f, _ := fetcher(t, bundle.Options{URL: s.URL(), Source: rootCreds(), Attempts: 2})
	p, err := bundle.NewPublisher(mgr.GetClient(), c, f, "published", "rulesets/", bundle.NewMetrics(prometheus.NewRegistry()), log)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	stop := devtest.Run(mgr)
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return direct, c
}

func bundleStatus(t *testing.T, c client.Client, ns, name string) *wafv1alpha1.BundleStatus {
	var rs wafv1alpha1.RuleSet
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &rs); err != nil {
		t.Fatal(err)
	}
	return rs.Status.Bundle
}

// A RuleSet's cached revision is published to storage, status.bundle says
// where, and the Fetcher reads it back into a cache as the same rule set.
// Storage down: the next revision stays processing, the last published
// bundle stays named; storage back: it is published.
func TestRuleSetPublishesItsBundle(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, "published")
	c, cc := publishing(t, s)
	const ns = "bundle-publish"
	rules := "SecRuleEngine On\nSecRule ARGS \"@contains attack\" \"id:6001,phase:2,deny,status:403\"\n"
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&wafv1alpha1.RuleSource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "base"}, Spec: wafv1alpha1.RuleSourceSpec{Rules: rules}},
		&wafv1alpha1.RuleSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: wafv1alpha1.RuleSetSpec{Sources: []wafv1alpha1.SourceReference{{Name: "base"}}}},
		&wafv1alpha1.RuleSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "broken"}, Spec: wafv1alpha1.RuleSetSpec{Sources: []wafv1alpha1.SourceReference{{Name: "absent"}}}},
	} {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	var st *wafv1alpha1.BundleStatus
	devtest.Eventually(t, "status.bundle ready", func() bool {
		st = bundleStatus(t, c, ns, "web")
		return st != nil && st.State == wafv1alpha1.BundleStateReady
	})
	if want := "s3://published/rulesets/" + ns + "/web/" + st.SHA256 + ".json"; st.Location != want {
		t.Fatalf("location %s, want %s", st.Location, want)
	}
	f, _ := fetcher(t, bundle.Options{URL: s.URL(), Source: rootCreds()})
	res, err := f.Get(ctx(t), "other/policy", st.Location, st.SHA256)
	if err != nil || res.Bundle.Rules != rules {
		t.Fatalf("published bundle read back: %v %q", err, res.Bundle.Rules)
	}
	served, _ := cc.Get(cache.Key(ns, "web"))
	other := cache.New(nil, nil)
	if e := bundle.Install(other, "other/policy", res.Bundle); e.UUID != served.UUID {
		t.Fatalf("fetched bundle installs as revision %s, the RuleSet's is %s", e.UUID, served.UUID)
	}
	devtest.Eventually(t, "status.bundle invalid for a RuleSet that never compiled", func() bool {
		b := bundleStatus(t, c, ns, "broken")
		return b != nil && b.State == wafv1alpha1.BundleStateInvalid && strings.Contains(b.Message, wafv1alpha1.ReasonRuleSourceNotFound)
	})

	s.Stop()
	// A merge patch: Portal writes the RuleSource's status meanwhile.
	src := &wafv1alpha1.RuleSource{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "base"}}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"rules": strings.Replace(rules, "attack", "exploit", 1)}})
	if err := c.Patch(context.Background(), src, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	devtest.Eventually(t, "status.bundle processing while storage is down", func() bool {
		b := bundleStatus(t, c, ns, "web")
		return b.State == wafv1alpha1.BundleStateProcessing && b.Location == st.Location && b.Message != ""
	})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	devtest.Eventually(t, "the new revision published once storage is back", func() bool {
		b := bundleStatus(t, c, ns, "web")
		return b.State == wafv1alpha1.BundleStateReady && b.SHA256 != st.SHA256
	})
}
