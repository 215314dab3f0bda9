package manager

import (
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/vilaca/portal/internal/certs"
	"github.com/vilaca/portal/internal/flagalias"
	"github.com/vilaca/portal/internal/waf"
	wafbinding "github.com/vilaca/portal/internal/waf/binding"
	wafbundle "github.com/vilaca/portal/internal/waf/bundle"
	wafcache "github.com/vilaca/portal/internal/waf/cache"
	wafcontroller "github.com/vilaca/portal/internal/waf/controller"
	wafengine "github.com/vilaca/portal/internal/waf/engine"
	wafproxy "github.com/vilaca/portal/internal/waf/proxy"
)

// wafLayer is the L7 WAF rule pipeline and its rule set cache.
type wafLayer struct{ opts waf.Options }

func (*wafLayer) Name() string { return "waf" }

// metricsSections implements registeredLayer.
func (*wafLayer) metricsSections() []MetricsSection {
	return []MetricsSection{
		{"WAF rules", "waf-rules", func(r prometheus.Registerer) {
			wafcontroller.NewMetrics(r)
			wafcache.NewMetrics(r)
			wafbinding.NewMetrics(r)
			// As internal/waf/setup.go names the rule set cache's certificate metrics.
			certs.NewNamedMetrics(r, "portal_waf_cache_cert", "rule set cache")
			wafengine.NewMetrics(r)
		}},
		{"WAF bundles", "waf-bundles", func(r prometheus.Registerer) { wafbundle.NewMetrics(r) }},
		// The data plane `portal waf-proxy` runs, which the layer deploys.
		{"WAF proxy", "waf-proxy", func(r prometheus.Registerer) { wafproxy.NewMetrics(r) }},
	}
}

// Provide offers nothing: the WAF neither feeds nor reads another layer.
func (*wafLayer) Provide(*Board) error { return nil }

func (l *wafLayer) Setup(d Deps) error {
	o := l.opts
	o.Logger = d.Logger
	o.Namespace = d.Namespace
	o.Registerer = d.Registerer
	service, secret := o.CacheService, o.CacheCertSecret
	if service == "" {
		service = waf.DefaultCacheService
	}
	// Never certs' default, which is the webhook's Secret.
	if secret == "" {
		secret = waf.DefaultCacheCertSecret
	}
	co := certs.CacheOptions(d.Namespace, service, secret, d.Logger, d.Registerer)
	co.IPAddresses = append(co.IPAddresses, listenIPs(o.CacheAddr)...)
	co.Clock = d.Clock
	cc, err := certs.Setup(d.Manager, co, "waf-cache-certificate")
	if err != nil {
		return fmt.Errorf("cache certificate: %w", err)
	}
	o.Certificates = cc
	o.Clock = d.Clock
	_, err = waf.Setup(d.Manager, o)
	return err
}

func (*wafLayer) fromConfig(cfg *Config) (Layer, error) {
	if !cfg.WAF {
		return nil, nil
	}
	return &wafLayer{opts: cfg.WAFOptions}, nil
}

// listenIPs is the address a listener on addr binds, when it names one
// other than the loopback (which the certificate always holds) and the
// unspecified address: clients that dial it verify the certificate.
func listenIPs(addr string) []net.IP {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsLoopback() || ip.IsUnspecified() {
		return nil
	}
	return []net.IP{ip}
}

// AddFlags binds the WAF rule pipeline's, the Engine controller's and the
// S3 bundles' flags.
func (*wafLayer) AddFlags(f *pflag.FlagSet, cfg *Config) {
	w := &cfg.WAFOptions
	f.BoolVar(&cfg.WAF, "waf", cfg.WAF, "run the WAF rule pipeline (RuleSource, RuleData, RuleSet) and its cache server (L7)")
	f.StringVar(&w.CacheAddr, "waf-cache-addr", w.CacheAddr, "listen address of the WAF rule cache server (TLS)")
	f.StringVar(&w.CacheService, "waf-cache-service", w.CacheService, "Service data planes reach the rule cache by (in Portal's namespace); its DNS names go into the cache's serving certificate")
	f.StringVar(&w.CacheCertSecret, "waf-cache-cert-secret", w.CacheCertSecret, "Secret (in Portal's namespace) holding the rule cache's CA and serving certificate, issued and renewed by Portal")
	f.IntVar(&w.CacheMaxConcurrent, "waf-cache-max-concurrent", w.CacheMaxConcurrent, "requests the rule cache answers at once; more get 503 with Retry-After")
	f.DurationVar(&w.CacheMaxAge, "waf-cache-max-age", w.CacheMaxAge, "evict cached rule set revisions older than this (a rule set's latest revision is never evicted)")
	f.Int64Var(&w.CacheMaxSize, "waf-cache-max-size", w.CacheMaxSize, "evict the oldest revisions when the cache holds more bytes than this")
	f.DurationVar(&w.CacheGCInterval, "waf-cache-gc-interval", w.CacheGCInterval, "how often the cache evicts")
	wc := &w.Compile
	f.Int64Var(&wc.MaxRuleSetBytes, "waf-max-ruleset-bytes", wc.MaxRuleSetBytes, "reject a RuleSet whose sources and data files hold more bytes than this together (reason TooLarge)")
	f.IntVar(&wc.MaxDataFileBytes, "waf-max-data-file-bytes", wc.MaxDataFileBytes, "reject a RuleSet whose @pmFromFile, @ipMatchFromFile or @validateSchema reads a data file larger than this (reason TooLarge)")
	f.DurationVar(&wc.CompileTimeout, "waf-compile-timeout", wc.CompileTimeout, "give up on a RuleSet compile after this long (reason CompileTimeout)")
	f.IntVar(&wc.Concurrency, "waf-compile-concurrency", wc.Concurrency, "RuleSets compiled at once; one namespace uses at most half of them (at least one)")
	f.Int64Var(&wc.MaxLastGoodBytes, "waf-max-last-good-bytes", wc.MaxLastGoodBytes, "weight of the last good WAFs kept open to speed up recompiles; the oldest are closed beyond it")
	// The Engine controller (internal/waf/engine).
	we := &w.Engine
	f.StringVar(&we.WASMImage, "waf-wasm-image", we.WASMImage, "OCI reference (oci://...) of the Coraza WASM plugin for istio-wasm Engines that name none in spec.driver.wasm.image")
	f.StringVar(&we.ProxyImage, "waf-proxy-image", we.ProxyImage, "image of the portal binary that waf-proxy Engines run when they name none in spec.driver.wafProxy.image")
	f.StringVar(&we.OperatorName, "operator-name", we.OperatorName, "name of Portal's Deployment; when set, istio-wasm Engines also get an Istio ServiceEntry (<name>-waf-cache, in --namespace) for the rule cache, and a DestinationRule with the cache's CA in a Secret, in the Engine's namespace, for TLS to it")
	f.StringSliceVar(&we.AllowedImages, "waf-engine-allowed-images", we.AllowedImages, "image prefixes an Engine may name in spec.driver.wasm.image or spec.driver.wafProxy.image (e.g. oci://registry.example/waf/); empty: Engines get only --waf-wasm-image and --waf-proxy-image")
	f.DurationVar(&we.TokenExpiration, "waf-engine-token-expiration", we.TokenExpiration, "lifetime of the cache tokens Portal puts in WasmPlugins (at least 10m); renewed when a fifth of it is left")

	// WAF bundles in S3-compatible storage (internal/waf/bundle).
	wb := &w.Bundle
	f.StringVar(&wb.URL, "bundle-storage-url", wb.URL, "S3-compatible storage WAF bundles are fetched from and published to, http(s)://host[:port], buckets addressed by path; empty turns S3 bundles off")
	f.StringVar(&wb.Region, "bundle-storage-region", wb.Region, "region requests to bundle storage are signed for")
	f.StringVar(&wb.CredentialsSecret, "bundle-storage-credentials-secret", wb.CredentialsSecret, "Secret (NAME in --namespace, or NAMESPACE/NAME) with accessKeyID and secretAccessKey for bundle storage, watched: a change is used by the next request; empty: anonymous")
	f.StringVar(&wb.CASecret, "bundle-storage-ca-secret", wb.CASecret, "Secret (NAME or NAMESPACE/NAME) whose ca.crt verifies bundle storage's certificate, watched; empty: the system roots")
	f.StringVar(&wb.ClientCertSecret, "bundle-storage-client-cert-secret", wb.ClientCertSecret, "Secret (NAME or NAMESPACE/NAME) whose tls.crt and tls.key Portal presents to bundle storage (mutual TLS), watched")
	f.BoolVar(&wb.SkipVerify, "bundle-storage-skip-verify", wb.SkipVerify, "do not verify bundle storage's certificate (development only: anyone on the path can serve bundles, though each is still sha256-checked)")
	f.Int64Var(&wb.MaxBytes, "bundle-max-bytes", wb.MaxBytes, "refuse a bundle larger than this many bytes before reading it (reason BundleTooLarge)")
	f.IntVar(&wb.Attempts, "bundle-fetch-attempts", wb.Attempts, "requests one bundle fetch makes at most; network errors, 5xx, 408 and 429 are retried with exponential backoff, other 4xx, TLS and checksum failures are not")
	f.StringVar(&wb.CacheDir, "bundle-cache-dir", wb.CacheDir, "directory that keeps each policy's last good bundle across restarts (mount a volume); empty keeps them in memory only")
	f.Int64Var(&wb.CacheMaxBytes, "bundle-cache-max-bytes", wb.CacheMaxBytes, "bytes of bundles --bundle-cache-dir may hold; past it a bundle is enforced but not persisted")
	f.StringVar(&wb.PublishBucket, "bundle-publish-bucket", wb.PublishBucket, "publish every RuleSet's cached revision to this bucket of --bundle-storage-url and report it in status.bundle; empty publishes nothing")
	f.StringVar(&wb.PublishPrefix, "bundle-publish-prefix", wb.PublishPrefix, "object key prefix of published bundles (ends with /); keys are PREFIX<namespace>/<name>/<sha256>.json")
	f.StringSliceVar(&wb.NamespaceLocations, "bundle-namespace-locations", wb.NamespaceLocations, "roots s3://BUCKET/ or s3://BUCKET/PREFIX/ under which a WAFGatewayBindingPolicy's spec.bundle may name only its own namespace's keys, ROOT<namespace>/...; empty: s3://<--bundle-publish-bucket>/<--bundle-publish-prefix> when publishing, else none")
	f.StringSliceVar(&wb.SharedLocations, "bundle-shared-locations", wb.SharedLocations, "roots s3://BUCKET/ or s3://BUCKET/PREFIX/ whose keys every namespace's WAFGatewayBindingPolicies may name in spec.bundle (bundles vetted for all tenants); empty: none")
	f.IntVar(&wb.FetchConcurrency, "bundle-fetch-concurrency", wb.FetchConcurrency, "bundles fetched at once on each replica, each holding up to --bundle-max-bytes; one namespace uses at most half of them (at least one) and waits behind its own")

	// Names the cache's flags had before they were prefixed with waf-.
	flagalias.Deprecated(f, "cache-max-age", "waf-cache-max-age")
	flagalias.Deprecated(f, "cache-max-size", "waf-cache-max-size")
	flagalias.Deprecated(f, "cache-gc-interval", "waf-cache-gc-interval")
}

// CheckFlags leaves the WAF's settings to waf.Setup, which reports them.
func (*wafLayer) CheckFlags(*Config) error { return nil }
