package bundle

import (
	"log/slog"
	"time"
)

// Defaults of the flags.
const (
	DefaultMaxBytes       = 64 << 20
	DefaultCacheMaxBytes  = 1 << 30
	DefaultAttempts       = 5
	DefaultInitialBackoff = 500 * time.Millisecond
	DefaultMaxBackoff     = 10 * time.Second
	DefaultAttemptTimeout = time.Minute
	DefaultRegion         = "us-east-1"
	// DefaultRefusalTTL is how long a bundle refused for its content
	// (IntegrityError, BundleTooLarge, InvalidBundle) is not fetched again.
	DefaultRefusalTTL = time.Minute
	// DefaultFetchConcurrency is how many bundles a replica fetches at
	// once: each fetch holds up to MaxBytes in memory.
	DefaultFetchConcurrency = 4
)

// Options configure a Fetcher. Zero fields take the defaults above.
type Options struct {
	// URL is storage's endpoint (--bundle-storage-url), http or https;
	// buckets are addressed by path (https://host/bucket/key), as
	// S3-compatible stores expect. Required.
	URL string
	// Region signs requests (--bundle-storage-region).
	Region string
	// Source gives credentials and TLS; nil: anonymous, system roots.
	Source ConfigSource
	// MaxBytes caps one bundle (--bundle-max-bytes): a larger object is
	// refused before it is read.
	MaxBytes int64
	// Dir persists last good bundles (--bundle-cache-dir); "" keeps them
	// in memory only. CacheMaxBytes bounds it (--bundle-cache-max-bytes).
	Dir           string
	CacheMaxBytes int64
	// Attempts is how many requests one fetch makes at most; transient
	// failures wait InitialBackoff, then twice that each time, up to
	// MaxBackoff, with 20% jitter.
	Attempts       int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// AttemptTimeout bounds one request, body included.
	AttemptTimeout time.Duration
	// RefusalTTL: a location and sha256 whose content was refused
	// (checksum, size, document) fail again from memory for this long, so a
	// policy pinning a wrong digest does not download the object on every
	// reconcile.
	RefusalTTL time.Duration
	// MaxDataFileBytes is the RuleSet compiler's limit on a data file a
	// file operator reads (--waf-max-data-file-bytes), applied to fetched
	// bundles by the sandbox check; 0: its default.
	MaxDataFileBytes int
	Metrics          *Metrics
	Logger           *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Region == "" {
		o.Region = DefaultRegion
	}
	if o.Source == nil {
		o.Source = StaticConfig{}
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.CacheMaxBytes <= 0 {
		o.CacheMaxBytes = DefaultCacheMaxBytes
	}
	if o.Attempts <= 0 {
		o.Attempts = DefaultAttempts
	}
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = DefaultInitialBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.RefusalTTL <= 0 {
		o.RefusalTTL = DefaultRefusalTTL
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = DefaultAttemptTimeout
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}
