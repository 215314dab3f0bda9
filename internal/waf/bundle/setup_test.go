package bundle_test

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/cache"
)

func TestSetupChecksTheFlags(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = wafv1alpha1.AddToScheme(scheme)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	setup := func(o bundle.SetupOptions) (*bundle.Bundles, error) {
		mgr, err := devtest.NewManager(cluster(t), scheme)
		if err != nil {
			t.Fatal(err)
		}
		return bundle.Setup(mgr, o, "portal-system", cache.New(nil, nil), prometheus.NewRegistry(), log)
	}
	off := bundle.DefaultSetupOptions()
	if f, err := setup(off); f != nil || err != nil {
		t.Fatalf("no --bundle-storage-url: %v %v, want bundles off", f, err)
	}
	on := bundle.DefaultSetupOptions()
	on.URL, on.CASecret, on.PublishBucket, on.PublishPrefix = "https://storage.example:9000", "storage-ca", "published", "rulesets/"
	b, err := setup(on)
	if b == nil || err != nil {
		t.Fatalf("bundles on: %v %v", b, err)
	}
	// By default a namespace reads what Portal publishes for it, and
	// nothing else.
	published := bundle.PublishedLocation("published", "rulesets/", "shop", "rs", strings.Repeat("a", 64))
	if err := b.Access.Check("shop", published); err != nil {
		t.Errorf("namespace shop may not read its own published bundle: %v", err)
	}
	for _, loc := range []string{"s3://published/rulesets/team-a/rs/x.json", "s3://published/shop/x.json", "s3://other/rulesets/shop/x.json"} {
		l, err := bundle.ParseLocation(loc)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Access.Check("shop", l); bundle.Reason(err) != bundle.ReasonLocationNotAllowed {
			t.Errorf("namespace shop may read %s by default: %v", loc, err)
		}
	}
	// Without publishing or locations, nothing may be read.
	bare := on
	bare.PublishBucket, bare.PublishPrefix = "", ""
	if b, err := setup(bare); err != nil || b.Access.Check("shop", published) == nil {
		t.Errorf("with no location configured namespace shop may read %s (%v)", published, err)
	}
	wide := bare
	wide.NamespaceLocations, wide.SharedLocations = []string{"s3://tenants/"}, []string{"s3://shared/crs/"}
	if b, err := setup(wide); err != nil || !slices.Equal(b.Access.Allowed("shop"), []string{"s3://tenants/shop/", "s3://shared/crs/"}) {
		t.Errorf("with locations configured namespace shop may read %v (%v)", b.Access.Allowed("shop"), err)
	}
	for want, mutate := range map[string]func(*bundle.SetupOptions){
		"--bundle-publish-bucket needs --bundle-storage-url": func(o *bundle.SetupOptions) { o.URL = ""; o.PublishBucket = "b" },
		"--bundle-storage-url":                               func(o *bundle.SetupOptions) { o.URL = "storage.example" },
		"--bundle-storage-ca-secret":                         func(o *bundle.SetupOptions) { o.CASecret = "a/b/c" },
		"--bundle-publish-bucket":                            func(o *bundle.SetupOptions) { o.PublishBucket = "Not_A_Bucket!" },
		"must end with /":                                    func(o *bundle.SetupOptions) { o.PublishPrefix = "rulesets" },
		"--bundle-namespace-locations needs --bundle-storage-url": func(o *bundle.SetupOptions) {
			o.URL, o.PublishBucket, o.NamespaceLocations = "", "", []string{"s3://b/"}
		},
		"--bundle-shared-locations needs --bundle-storage-url": func(o *bundle.SetupOptions) {
			o.URL, o.PublishBucket, o.SharedLocations = "", "", []string{"s3://b/"}
		},
		"s3://BUCKET/PREFIX/": func(o *bundle.SetupOptions) { o.NamespaceLocations = []string{"s3://b/tenants"} },
	} {
		o := on
		mutate(&o)
		if _, err := setup(o); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one naming %s", err, want)
		}
	}
}
