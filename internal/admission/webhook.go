// Package admission is Portal's validating admission webhook (layer 4).
//
// The API server sends AdmissionReview v1 requests for the kinds the loaded
// admission rules match; Webhook evaluates the rules whose mode includes
// admission and answers: any failing deny rule rejects the request with every
// denying rule's message, warn rules add warnings, dryrun rules are only
// counted. A namespace annotated portal.io/bypass=true is admitted without
// evaluation (break-glass, audited). ConfigManager keeps the
// ValidatingWebhookConfiguration that routes requests here in line with the
// loaded rules.
//
// Wiring, with mgr a controller-runtime manager and eng the rule engine:
//
//	wh, err := admission.New(admission.Options{
//		Evaluator: eng, Namespaces: mgr.GetCache(), Logger: log,
//		RulesLoaded: loaded, FailOpen: failOpen,
//	})
//	mgr.GetWebhookServer().Register(admission.Path, wh)
//	mgr.AddReadyzCheck("admission", wh.ReadyCheck())
//
// The webhook server itself is controller-runtime's; TLSOptions configures it
// to serve a certificate from memory.
package admission

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/vilaca/portal/internal/core"
)

// Options configure the webhook.
type Options struct {
	// Evaluator runs the rules; *engine.Engine is one. Required.
	Evaluator Evaluator
	// Namespaces reads Namespace objects for the break-glass annotation:
	// the manager's cache (mgr.GetCache()). nil disables break-glass.
	Namespaces client.Reader
	// Logger receives decisions worth logging, rule errors and the bypass
	// audit lines. Default slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics. Default: controller-runtime's
	// metrics.Registry, served on the manager's metrics endpoint.
	Registerer prometheus.Registerer
	// RulesLoaded is closed once the rule index has completed its initial
	// load. Until then requests are answered "rules are still loading"
	// (rejected, or admitted with a warning when FailOpen) and the webhook is
	// not ready. nil means the rules are loaded from the start.
	RulesLoaded <-chan struct{}
	// FailOpen admits requests Portal fails to evaluate (internal errors,
	// rules still loading) with a warning instead of rejecting them. Set it
	// together with ConfigOptions.FailOpen, so Portal behaves the same
	// whether it fails inside the handler or is unreachable.
	FailOpen bool
	// Health tunes when handler failures make the webhook not ready.
	Health HealthOptions
	// Verdicts, when set, receives the failing results of rules with
	// response actions, after the decision and without waiting: the
	// actions run later, on the leader, never on this request's path.
	Verdicts core.VerdictSink
	// BodyReadTimeout bounds how long reading one request's body may take,
	// so a client that sends a body slowly cannot hold a connection and a
	// goroutine for ever. Default 10s: the API server sends its bodies at
	// once, and gives up on the webhook after at most 30s.
	BodyReadTimeout time.Duration
	// MaxConcurrentEvaluations bounds the requests whose rules are
	// evaluated at once; the others wait for a slot, queued per namespace
	// and served round-robin across namespaces, until their deadline.
	// Default DefaultEvaluationsPerCPU times GOMAXPROCS.
	MaxConcurrentEvaluations int
	// MaxWaitingPerNamespace bounds the requests of one namespace waiting
	// for a slot; more are answered 429 at once. Default
	// DefaultMaxWaitingPerNamespace.
	MaxWaitingPerNamespace int
}

// Webhook is the validating admission webhook: an admission.Handler, and an
// http.Handler serving AdmissionReview v1 at Path.
type Webhook struct {
	handler *handler
	http    *reviewHandler
}

var _ admission.Handler = (*Webhook)(nil)

// RuleSeries returns the webhook's per-rule metric vectors (label "rule"),
// for rule.Series to prune when rules go.
func (w *Webhook) RuleSeries() []*prometheus.MetricVec {
	return []*prometheus.MetricVec{w.handler.metrics.DryRunViolations.MetricVec, w.handler.metrics.RuleErrors.MetricVec}
}

// Handle implements admission.Handler: it decides one request.
func (w *Webhook) Handle(ctx context.Context, req admission.Request) admission.Response {
	return w.handler.Handle(ctx, req)
}

// New returns the webhook.
func New(o Options) (*Webhook, error) {
	if o.Evaluator == nil {
		return nil, errors.New("admission: Options.Evaluator is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registerer == nil {
		o.Registerer = metrics.Registry
	}
	m := NewMetrics(o.Registerer)
	h := &handler{
		eval:     o.Evaluator,
		bypass:   &bypass{namespaces: o.Namespaces, log: o.Logger, metrics: m},
		log:      o.Logger,
		metrics:  m,
		health:   newHealth(o.RulesLoaded, o.Health),
		failOpen: o.FailOpen,
		verdicts: o.Verdicts,
		slots:    newSlots(o.MaxConcurrentEvaluations, o.MaxWaitingPerNamespace, m),
	}
	hook := &admission.Webhook{
		Handler:      h,
		RecoverPanic: ptr.To(true),
		// The handler logs what matters; skip building a per-request
		// logger on the hot path.
		LogConstructor: func(base logr.Logger, _ *admission.Request) logr.Logger { return base },
	}
	if o.BodyReadTimeout <= 0 {
		o.BodyReadTimeout = 10 * time.Second
	}
	return &Webhook{handler: h, http: &reviewHandler{hook: hook, log: o.Logger, metrics: m, bodyTimeout: o.BodyReadTimeout,
		defaultTimeout: DefaultRequestTimeout}}, nil
}

// ServeHTTP serves AdmissionReview v1 requests. Register it with the
// manager's webhook server at Path.
func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) { w.http.ServeHTTP(rw, r) }

// Metrics returns the webhook's metrics.
func (w *Webhook) Metrics() *Metrics { return w.handler.metrics }

// ReadyCheck is a readiness check for mgr.AddReadyzCheck: it fails until the
// rules have loaded, and while handler failures (recovered panics, internal
// errors; never denials) persist, per Options.Health.
func (w *Webhook) ReadyCheck() healthz.Checker { return w.handler.health.check }

// TLSOptions configure controller-runtime's webhook server
// (webhook.Options.TLSOpts) to serve the certificate getCert returns, read
// on every handshake so a renewed certificate is served without a restart,
// with TLS 1.2 as the minimum and HTTP/2 off (HTTP/2 rapid reset,
// CVE-2023-44487; the API server speaks HTTP/1.1 to webhooks just as well).
func TLSOptions(getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) []func(*tls.Config) {
	return []func(*tls.Config){func(c *tls.Config) {
		c.GetCertificate = getCert
		c.MinVersion = tls.VersionTLS12
		c.NextProtos = []string{"http/1.1"}
	}}
}

// ClientAuth makes the webhook server accept only clients that present a
// certificate signed by a CA in caPEM (PEM, one or more certificates) and,
// when allowedNames is not empty, whose common name or one of whose DNS
// names is in allowedNames. With it, only the API server (configured through
// an AdmissionConfiguration kubeConfigFile to present such a certificate) can
// send AdmissionReviews; anything else on the network fails the TLS
// handshake before a byte of its request is read. Append it to TLSOptions.
func ClientAuth(caPEM []byte, allowedNames []string) (func(*tls.Config), error) {
	pool, _, err := parseCA(caPEM)
	if err != nil {
		return nil, err
	}
	return clientAuth(pool, allowedNames, nil), nil
}

// clientAuth is ClientAuth, the handshake demanding the certificate unless
// guard serves a path that authenticates its callers otherwise (applied
// when the server starts, after its paths are registered).
func clientAuth(pool *x509.CertPool, allowedNames []string, guard *ClientGuard) func(*tls.Config) {
	allowed := slices.Clone(allowedNames)
	return func(c *tls.Config) {
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
		optional := guard.certificateOptional()
		if optional {
			// A certificate presented is verified as before; guard
			// refuses the requests of a connection without one on
			// every path but the open ones.
			c.ClientAuth = tls.VerifyClientCertIfGiven
		}
		if len(allowed) == 0 {
			return
		}
		// Runs after the chain has been verified against pool.
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				if optional {
					return nil
				}
				return errors.New("admission: no client certificate")
			}
			leaf := cs.PeerCertificates[0]
			if slices.Contains(allowed, leaf.Subject.CommonName) || slices.ContainsFunc(leaf.DNSNames, func(n string) bool { return slices.Contains(allowed, n) }) {
				return nil
			}
			return fmt.Errorf("admission: client certificate %q (DNS names %v) is not one of the allowed names %v", leaf.Subject.CommonName, leaf.DNSNames, allowed)
		}
	}
}
