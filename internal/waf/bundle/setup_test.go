package bundle_test

import (
	"io"
	"log/slog"
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
	setup := func(o bundle.SetupOptions) (*bundle.Fetcher, error) {
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
	if f, err := setup(on); f == nil || err != nil {
		t.Fatalf("bundles on: %v %v", f, err)
	}
	for want, mutate := range map[string]func(*bundle.SetupOptions){
		"--bundle-publish-bucket needs --bundle-storage-url": func(o *bundle.SetupOptions) { o.URL = ""; o.PublishBucket = "b" },
		"--bundle-storage-url":                               func(o *bundle.SetupOptions) { o.URL = "storage.example" },
		"--bundle-storage-ca-secret":                         func(o *bundle.SetupOptions) { o.CASecret = "a/b/c" },
		"--bundle-publish-bucket":                            func(o *bundle.SetupOptions) { o.PublishBucket = "Not_A_Bucket!" },
		"must end with /":                                    func(o *bundle.SetupOptions) { o.PublishPrefix = "rulesets" },
	} {
		o := on
		mutate(&o)
		if _, err := setup(o); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one naming %s", err, want)
		}
	}
}
