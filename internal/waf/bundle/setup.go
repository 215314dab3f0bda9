package bundle

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vilaca/portal/internal/waf/cache"
)

// SetupOptions are the --bundle-* flags.
type SetupOptions struct {
	// URL is --bundle-storage-url; "" turns S3 bundles off.
	URL    string
	Region string
	// CredentialsSecret, CASecret and ClientCertSecret are NAME (in
	// Portal's namespace) or NAMESPACE/NAME; "" is not used.
	CredentialsSecret string
	CASecret          string
	ClientCertSecret  string
	SkipVerify        bool
	MaxBytes          int64
	CacheDir          string
	CacheMaxBytes     int64
	Attempts          int
	// PublishBucket, when set, publishes every RuleSet's cached revision
	// there, under PublishPrefix.
	PublishBucket string
	PublishPrefix string
	// NamespaceLocations are roots (s3://bucket/prefix/) under which a
	// namespace's policies read only ROOT<namespace>/...; empty: the
	// publish bucket and prefix, when publishing. SharedLocations are roots
	// every namespace reads. See Access.
	NamespaceLocations []string
	SharedLocations    []string
	// FetchConcurrency is how many bundles are fetched at once; one
	// namespace uses at most half of them, and at least one.
	FetchConcurrency int
	// MaxDataFileBytes is --waf-max-data-file-bytes, which fetched bundles
	// are checked against like RuleSets (set by the WAF layer).
	MaxDataFileBytes int
}

// DefaultSetupOptions are the flags' defaults.
func DefaultSetupOptions() SetupOptions {
	return SetupOptions{
		Region: DefaultRegion, MaxBytes: DefaultMaxBytes, CacheMaxBytes: DefaultCacheMaxBytes, Attempts: DefaultAttempts,
		FetchConcurrency: DefaultFetchConcurrency,
	}
}

// Bundles is what Setup gives the WAFGatewayBindingPolicy controller.
type Bundles struct {
	Fetcher *Fetcher
	// Access is which locations each namespace's policies may read.
	Access *Access
	// FetchConcurrency bounds the fetches running at once.
	FetchConcurrency int
	Metrics          *Metrics
}

// Setup adds S3 bundles to mgr when o.URL is set: the Secret watch (every
// replica), the Fetcher and Access it returns for the
// WAFGatewayBindingPolicy controller, and, with o.PublishBucket, the RuleSet
// bundle publisher (leader). It returns nil, nil when bundles are off.
func Setup(mgr ctrl.Manager, o SetupOptions, namespace string, c *cache.Cache, reg prometheus.Registerer, log *slog.Logger) (*Bundles, error) {
	if o.URL == "" {
		for _, f := range []struct {
			name string
			set  bool
		}{
			{"--bundle-publish-bucket", o.PublishBucket != ""},
			{"--bundle-namespace-locations", len(o.NamespaceLocations) > 0},
			{"--bundle-shared-locations", len(o.SharedLocations) > 0},
		} {
			if f.set {
				return nil, errors.New(f.name + " needs --bundle-storage-url")
			}
		}
		return nil, nil
	}
	var refs SecretRefs
	var err error
	if refs.Credentials, err = ParseSecretRef(o.CredentialsSecret, namespace); err != nil {
		return nil, fmt.Errorf("--bundle-storage-credentials-secret: %w", err)
	}
	if refs.CA, err = ParseSecretRef(o.CASecret, namespace); err != nil {
		return nil, fmt.Errorf("--bundle-storage-ca-secret: %w", err)
	}
	if refs.ClientCert, err = ParseSecretRef(o.ClientCertSecret, namespace); err != nil {
		return nil, fmt.Errorf("--bundle-storage-client-cert-secret: %w", err)
	}
	kc, err := kubernetes.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, fmt.Errorf("bundles: client: %w", err)
	}
	src := NewSecretSource(kc, refs, o.SkipVerify)
	if err := mgr.Add(src); err != nil {
		return nil, err
	}
	m := NewMetrics(reg)
	f, err := NewFetcher(Options{
		URL: o.URL, Region: o.Region, Source: src, MaxBytes: o.MaxBytes, Dir: o.CacheDir,
		CacheMaxBytes: o.CacheMaxBytes, Attempts: o.Attempts, MaxDataFileBytes: o.MaxDataFileBytes, Metrics: m, Logger: log.With("component", "bundle"),
	})
	if err != nil {
		return nil, fmt.Errorf("--bundle-storage-url: %w", err)
	}
	if o.SkipVerify {
		log.Warn("--bundle-storage-skip-verify: the bundle storage certificate is not verified; use it in development only")
	}
	if o.PublishBucket != "" {
		p, err := NewPublisher(mgr.GetClient(), c, f, o.PublishBucket, o.PublishPrefix, m, log.With("component", "bundle-publisher"))
		if err != nil {
			return nil, fmt.Errorf("--bundle-publish-bucket: %w", err)
		}
		if err := p.SetupWithManager(mgr); err != nil {
			return nil, err
		}
	}
	// After the publisher, which checks the publish bucket and prefix the
	// default Access derives from.
	access, err := setupAccess(o, log)
	if err != nil {
		return nil, err
	}
	return &Bundles{Fetcher: f, Access: access, FetchConcurrency: max(1, o.FetchConcurrency), Metrics: m}, nil
}

// setupAccess builds the Access of the flags. By default a namespace reads
// only what Portal publishes for it, s3://BUCKET/PREFIX<namespace>/..., so
// a policy can pin its own namespace's RuleSets' bundles and nothing else.
func setupAccess(o SetupOptions, log *slog.Logger) (*Access, error) {
	namespaced := o.NamespaceLocations
	if len(namespaced) == 0 && o.PublishBucket != "" {
		namespaced = []string{"s3://" + o.PublishBucket + "/" + o.PublishPrefix}
	}
	access, err := NewAccess(namespaced, o.SharedLocations)
	if err != nil {
		return nil, fmt.Errorf("--bundle-namespace-locations, --bundle-shared-locations: %w", err)
	}
	if len(namespaced) == 0 && len(o.SharedLocations) == 0 {
		log.Warn("no bundle location is allowed: every WAFGatewayBindingPolicy spec.bundle is refused (LocationNotAllowed); set --bundle-namespace-locations, --bundle-shared-locations or --bundle-publish-bucket")
	}
	return access, nil
}
