// Package certs is Portal's webhook certificate controller: it keeps the
// serving certificate of Portal's webhooks in one Secret, serves it from
// memory, renews it before it expires and keeps the caBundle of the webhook
// configurations equal to the CA that signed it.
//
// Three parts run in the controller-runtime manager:
//
//   - the loader (every replica) watches the Secret and swaps the certificate
//     GetCertificate returns, so a renewal needs no restart; a replica that
//     serves nothing yet creates a missing Secret (self source), so it need
//     not wait for a leader that may not run its layer;
//   - the issuer (leader only, self source) creates the CA and the serving
//     certificate, and renews them (pki.Policy has the CA rotation steps);
//   - the injectors (leader only) write ca.crt into the caBundle of the named
//     ValidatingWebhookConfigurations and CRD conversion webhooks.
//
// With the cert-manager source only the loader and the injectors run: Portal
// reads the Secret cert-manager fills and never writes it.
package certs

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/pki"
)

// Source says where the certificate Secret comes from (flag --cert-source).
type Source string

const (
	// SourceSelf: Portal creates and renews the Secret itself.
	SourceSelf Source = "self"
	// SourceCertManager: cert-manager (or anything writing the same keys)
	// fills the Secret; Portal only reads it.
	SourceCertManager Source = "cert-manager"
)

// ParseSource parses a --cert-source value.
func ParseSource(s string) (Source, error) {
	switch Source(s) {
	case SourceSelf, SourceCertManager:
		return Source(s), nil
	}
	return "", fmt.Errorf("certificate source %q: want %q or %q", s, SourceSelf, SourceCertManager)
}

// Field owners of Portal's server-side apply writes. The caBundle injectors
// use their own owner: the objects they patch are applied in full by another
// writer (Portal's admission layer, or Helm), and an apply of only the
// caBundle under that writer's owner would drop every field the other apply
// set.
const (
	FieldOwner         = "portal"
	InjectorFieldOwner = "portal-cabundle"
)

// Defaults of Options.
const (
	DefaultSecretName    = "portal-webhook-cert"
	DefaultRenewBefore   = 14 * 24 * time.Hour
	DefaultCheckInterval = time.Hour
	DefaultValidity      = 90 * 24 * time.Hour
	DefaultCAValidity    = 5 * 365 * 24 * time.Hour
	DefaultCARenewBefore = 30 * 24 * time.Hour
	DefaultCAOverlap     = time.Hour
)

// Event reasons on the Secret and the patched objects.
const (
	ReasonIssued          = "CertificateIssued"
	ReasonRenewed         = "CertificateRenewed"
	ReasonInvalid         = "CertificateInvalid"
	ReasonReplaced        = "SecretReplaced"
	ReasonCABundleUpdated = "CABundleInjected"
)

// Options configures the controller. Namespace and, for the self source,
// DNSNames or IPAddresses are required; zero durations take the defaults.
type Options struct {
	// Namespace and SecretName locate the Secret (Portal's own namespace).
	Namespace  string
	SecretName string
	// Source is SourceSelf (default) or SourceCertManager.
	Source Source
	// DNSNames and IPAddresses are the serving certificate's names (self
	// source): usually ServiceDNSNames, plus 127.0.0.1 out of cluster.
	DNSNames    []string
	IPAddresses []net.IP
	// WebhookConfigurations and ConversionCRDs name the objects whose
	// caBundle is kept equal to ca.crt. Leave both empty to switch injection
	// off (cert-manager's CA injector may do it instead).
	WebhookConfigurations []string
	ConversionCRDs        []string
	// RenewBefore: renew the serving certificate when it expires within it.
	RenewBefore time.Duration
	// CheckInterval: look at the Secret at least this often.
	CheckInterval time.Duration
	// Validity of a new serving certificate and of a new CA.
	Validity, CAValidity time.Duration
	// CARenewBefore: start a CA rotation when the CA expires within it.
	CARenewBefore time.Duration
	// CAOverlap: how long each CA rotation step waits for clients and
	// replicas to catch up (see policy).
	CAOverlap time.Duration
	// Clock tells the time for certificate decisions (tests).
	Clock clock.PassiveClock
	// Log defaults to slog.Default(); Metrics to DefaultMetrics().
	Log     *slog.Logger
	Metrics *Metrics
	// ControllerName prefixes the names of the controllers ("certs" when
	// empty); a second certificate in the same manager needs its own.
	ControllerName string
}

// ServiceDNSNames are the names a Service is reached by in a cluster.
func ServiceDNSNames(service, namespace string) []string {
	return []string{
		service,
		service + "." + namespace,
		service + "." + namespace + ".svc",
		service + "." + namespace + ".svc.cluster.local",
	}
}

// Controller manages the webhook certificate. Create it with New, register
// it with SetupWithManager and use GetCertificate (or ConfigureTLS) in the
// webhook server.
type Controller struct {
	opts    Options
	policy  pki.Policy
	log     *slog.Logger
	metrics *Metrics
	clock   clock.PassiveClock

	current   atomic.Pointer[loaded]
	injectors []*injector

	// Set by SetupWithManager.
	client   client.Client // uncached: the issuer must see its own last write
	cache    cache.Cache   // the Secret and target metadata only
	recorder events.EventRecorder
}

// loaded is what the loader last read from the Secret.
type loaded struct {
	bundle *pki.Bundle
	caPEM  []byte
}

// New checks opts, applies the defaults and returns a controller.
func New(opts Options) (*Controller, error) {
	if err := defaults(&opts); err != nil {
		return nil, err
	}
	c := &Controller{
		opts:    opts,
		log:     opts.Log.With("secret", opts.Namespace+"/"+opts.SecretName, "source", string(opts.Source)),
		metrics: opts.Metrics,
		clock:   opts.Clock,
		policy: pki.Policy{
			DNSNames: opts.DNSNames, IPAddresses: opts.IPAddresses,
			Validity: opts.Validity, CAValidity: opts.CAValidity,
			RenewBefore: opts.RenewBefore, CARenewBefore: opts.CARenewBefore,
			Overlap: opts.CAOverlap,
		},
	}
	if len(opts.WebhookConfigurations) > 0 {
		c.injectors = append(c.injectors, newInjector(c, vwcTarget{}, opts.WebhookConfigurations))
	}
	if len(opts.ConversionCRDs) > 0 {
		c.injectors = append(c.injectors, newInjector(c, crdTarget{}, opts.ConversionCRDs))
	}
	return c, nil
}

func defaults(o *Options) error {
	if o.Namespace == "" {
		return errors.New("certs: Namespace is required")
	}
	setDefault := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	setDefault(&o.SecretName, DefaultSecretName)
	setDefault(&o.ControllerName, "certs")
	setDefault((*string)(&o.Source), string(SourceSelf))
	if _, err := ParseSource(string(o.Source)); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	for _, d := range []struct {
		p *time.Duration
		v time.Duration
	}{
		{&o.RenewBefore, DefaultRenewBefore}, {&o.CheckInterval, DefaultCheckInterval},
		{&o.Validity, DefaultValidity}, {&o.CAValidity, DefaultCAValidity},
		{&o.CARenewBefore, DefaultCARenewBefore}, {&o.CAOverlap, DefaultCAOverlap},
	} {
		if *d.p == 0 {
			*d.p = d.v
		}
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = DefaultMetrics()
	}
	if o.Source == SourceSelf && len(o.DNSNames) == 0 && len(o.IPAddresses) == 0 {
		return errors.New("certs: the self source needs DNSNames or IPAddresses")
	}
	// Each bound stops a renewal loop: a new certificate that is already due
	// (it never outlives its CA) would be replaced on every look.
	switch {
	case o.RenewBefore < 0 || o.RenewBefore >= o.Validity:
		return fmt.Errorf("certs: RenewBefore %s must be positive and below Validity %s", o.RenewBefore, o.Validity)
	case o.CARenewBefore >= o.CAValidity:
		return fmt.Errorf("certs: CARenewBefore %s must be below CAValidity %s", o.CARenewBefore, o.CAValidity)
	case o.CARenewBefore <= o.RenewBefore || o.CARenewBefore <= 2*o.CAOverlap:
		return fmt.Errorf("certs: CARenewBefore %s must exceed RenewBefore %s and twice CAOverlap %s",
			o.CARenewBefore, o.RenewBefore, o.CAOverlap)
	case o.CheckInterval < 0 || o.CAOverlap < 0:
		return errors.New("certs: CheckInterval and CAOverlap must be positive")
	}
	return nil
}

// GetCertificate returns the serving certificate last loaded from the
// Secret. It is a tls.Config.GetCertificate: every handshake sees the newest
// certificate, with no restart and no lock.
func (c *Controller) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cur := c.current.Load()
	if cur == nil {
		return nil, fmt.Errorf("no serving certificate loaded from Secret %s/%s yet", c.opts.Namespace, c.opts.SecretName)
	}
	return cur.bundle.Serving, nil
}

// ConfigureTLS makes cfg serve GetCertificate with TLS 1.2 at least. Pass it
// in controller-runtime's webhook.Options.TLSOpts; the webhook server then
// skips its own certificate files.
func (c *Controller) ConfigureTLS(cfg *tls.Config) {
	cfg.GetCertificate = c.GetCertificate
	if cfg.MinVersion < tls.VersionTLS12 {
		cfg.MinVersion = tls.VersionTLS12
	}
}

// Ready reports whether a serving certificate is loaded and not expired.
func (c *Controller) Ready() bool { return c.Check(nil) == nil }

// Check is a healthz.Checker for the manager's readyz endpoint: not ready
// until a certificate is loaded, and again once the loaded one expired.
func (c *Controller) Check(*http.Request) error {
	cur := c.current.Load()
	if cur == nil {
		_, err := c.GetCertificate(nil)
		return err
	}
	if leaf := cur.bundle.Serving.Leaf; !c.clock.Now().Before(leaf.NotAfter) {
		return fmt.Errorf("the serving certificate expired at %s", leaf.NotAfter.Format(time.RFC3339))
	}
	return nil
}

// CABundle returns ca.crt as last loaded (PEM, newest CA first), or nil.
// It is what clients of the webhook must trust.
func (c *Controller) CABundle() []byte {
	if cur := c.current.Load(); cur != nil {
		return bytes.Clone(cur.caPEM)
	}
	return nil
}
