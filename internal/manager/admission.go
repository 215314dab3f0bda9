package manager

import (
	"errors"
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/certs"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/forward"
)

// AdmissionConfig configures the L4 admission layer.
type AdmissionConfig struct {
	Enabled bool
	// Host and Port are where the webhook server listens (TLS).
	Host string
	Port int
	// ServiceName is the Service the API server reaches the webhook by in a
	// cluster; its DNS names go into the serving certificate.
	ServiceName string
	// LocalURL points the webhook configuration at https://127.0.0.1:Port
	// instead of the Service: for portal dev and tests, outside a cluster.
	LocalURL bool
	// ConfigName names the ValidatingWebhookConfiguration Portal manages.
	ConfigName string
	// CertSource is "self" (Portal issues and renews its certificate) or
	// "cert-manager" (Portal only reads CertSecret).
	CertSource string
	CertSecret string
	// FailOpen sets failurePolicy Ignore: if Portal is down, requests pass.
	FailOpen bool
	// ClientCAFile, when set, makes the webhook server require a client
	// certificate signed by a CA in this PEM file (the API server's, through
	// an AdmissionConfiguration kubeConfigFile) on every path but the
	// verdict forwarding endpoint; ClientAllowedNames further limits the
	// certificate's common name or DNS names.
	ClientCAFile       string
	ClientAllowedNames []string
	// MaxConcurrentEvaluations bounds the requests evaluated at once (0:
	// twice GOMAXPROCS); MaxWaitingPerNamespace bounds one namespace's
	// requests waiting for a slot.
	MaxConcurrentEvaluations int
	MaxWaitingPerNamespace   int
}

func defaultAdmission() AdmissionConfig {
	return AdmissionConfig{
		Port:        9443,
		ServiceName: "portal-webhook",
		ConfigName:  admission.ConfigName,
		CertSource:  string(certs.SourceSelf),
		CertSecret:  "portal-webhook-cert",

		MaxWaitingPerNamespace: admission.DefaultMaxWaitingPerNamespace,
	}
}

// admissionLayer is the L4 validating webhook: its certificate controller,
// its server, its handler and the webhook configuration it keeps in step
// with the rules.
type admissionLayer struct {
	cfg       AdmissionConfig
	namespace string
	certs     *certs.Controller
	server    webhook.Server
	// clientCA are the metrics of --webhook-client-ca-file, nil without it.
	clientCA *admission.ClientCAMetrics
}

func (*admissionLayer) Name() string { return "admission" }

// metricsSections implements registeredLayer.
func (*admissionLayer) metricsSections() []MetricsSection {
	return []MetricsSection{{"Admission", "admission", func(r prometheus.Registerer) {
		admission.NewMetrics(r)
		r.MustRegister(admission.NewClientCAMetrics().Collectors()...)
	}}}
}

// Provide hands the manager the webhook server, which serves the
// certificate controller's certificate.
func (l *admissionLayer) Provide(b *Board) error {
	Offer(b, "admission layer", managerOption(func(opts *ctrl.Options) { opts.WebhookServer = l.server }))
	tls := webhookTLS{caBundle: l.certs.CABundle}
	if !l.cfg.LocalURL {
		tls.serverName = l.cfg.ServiceName + "." + l.namespace + ".svc"
	}
	Offer(b, "admission layer", tls)
	return nil
}

// webhookTLS is what the other replicas trust the webhook server by: the
// CA of its certificate, which every replica holds, and a name the
// certificate bears. The forwarding endpoint is served on the webhook
// server, so a replica that forwards a verdict knows it reaches a Portal
// replica without a certificate of its own.
type webhookTLS struct {
	caBundle func() []byte
	// serverName is "" when the URL's host is in the certificate
	// (--webhook-local: 127.0.0.1).
	serverName string
}

// newAdmission prepares the certificate controller and the webhook server,
// which must exist before the manager is created.
func newAdmission(cfg *Config) (*admissionLayer, error) {
	a := cfg.Admission
	src, err := certs.ParseSource(a.CertSource)
	if err != nil {
		return nil, err
	}
	if a.Port <= 0 || a.Port > 65535 {
		return nil, fmt.Errorf("webhook port %d is not a port", a.Port)
	}
	co := certs.Options{
		Namespace:             cfg.Namespace,
		SecretName:            a.CertSecret,
		Source:                src,
		DNSNames:              certs.ServiceDNSNames(a.ServiceName, cfg.Namespace),
		WebhookConfigurations: []string{a.ConfigName},
		Log:                   cfg.Logger,
		Clock:                 cfg.Clock,
	}
	if a.LocalURL {
		co.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	cc, err := certs.New(co)
	if err != nil {
		return nil, fmt.Errorf("webhook certificates: %w", err)
	}
	tlsOpts := admission.TLSOptions(cc.GetCertificate)
	var clientCA *admission.ClientCAMetrics
	var guard *admission.ClientGuard
	if a.ClientCAFile != "" {
		clientCA = admission.NewClientCAMetrics()
		// The forwarding endpoint is the one path whose callers, other
		// replicas, hold no certificate from the API server's CA: they
		// prove themselves by a ServiceAccount token there. Every other
		// path, present or future, requires the certificate.
		guard = admission.NewClientGuard([]string{forward.Path}, clientCA, cfg.Logger)
		clientAuth, err := admission.ClientAuthFile(a.ClientCAFile, admission.ClientCAOptions{
			AllowedNames: a.ClientAllowedNames, Logger: cfg.Logger, Metrics: clientCA, Clock: cfg.Clock, Guard: guard})
		if err != nil {
			return nil, fmt.Errorf("webhook client CA: %w", err)
		}
		tlsOpts = append(tlsOpts, clientAuth)
	}
	server := webhook.NewServer(webhook.Options{
		Host:    a.Host,
		Port:    a.Port,
		TLSOpts: tlsOpts,
	})
	if guard != nil {
		server = guard.Server(server)
	}
	return &admissionLayer{cfg: a, namespace: cfg.Namespace, certs: cc, server: server, clientCA: clientCA}, nil
}

// Setup registers the webhook, its readiness and the configuration manager,
// which follows the rule set.
func (l *admissionLayer) Setup(d Deps) error {
	mgr := d.Manager
	if err := l.certs.SetupWithManager(mgr); err != nil {
		return err
	}
	if l.clientCA != nil && d.Registerer != nil {
		for _, c := range l.clientCA.Collectors() {
			if err := d.Registerer.Register(c); err != nil {
				return fmt.Errorf("webhook client CA metrics: %w", err)
			}
		}
	}
	if err := mgr.AddReadyzCheck("webhook-certificate", l.certs.Check); err != nil {
		return err
	}
	// The actions' verdict sink, when the actions layer is on.
	verdicts, err := One[core.VerdictSink](d.Board)
	if err != nil {
		return err
	}
	wh, err := admission.New(admission.Options{
		Evaluator:   d.Engine,
		Namespaces:  mgr.GetCache(),
		Logger:      d.Logger,
		Registerer:  d.Registerer,
		RulesLoaded: d.RulesLoaded,
		FailOpen:    l.cfg.FailOpen,
		Verdicts:    verdicts,

		MaxConcurrentEvaluations: l.cfg.MaxConcurrentEvaluations,
		MaxWaitingPerNamespace:   l.cfg.MaxWaitingPerNamespace,
	})
	if err != nil {
		return err
	}
	mgr.GetWebhookServer().Register(admission.Path, drainingHandler(wh, d.Draining))
	d.RuleSeries.Track(wh.RuleSeries()...)
	if err := mgr.AddReadyzCheck("admission", wh.ReadyCheck()); err != nil {
		return err
	}
	co := admission.ConfigOptions{
		Client:      mgr.GetClient(),
		Reader:      mgr.GetAPIReader(),
		Mapper:      mgr.GetRESTMapper(),
		Rules:       d.Engine,
		Name:        l.cfg.ConfigName,
		Namespace:   l.namespace,
		FailOpen:    l.cfg.FailOpen,
		CABundle:    l.certs.CABundle,
		RulesLoaded: d.RulesLoaded,
		Logger:      d.Logger,
	}
	if l.cfg.LocalURL {
		co.URL = admission.LocalURL(l.cfg.Port)
	} else {
		co.Service = &admission.ServiceReference{Namespace: l.namespace, Name: l.cfg.ServiceName, Port: 443}
	}
	cm, err := admission.NewConfigManager(co)
	if err != nil {
		return err
	}
	d.Rules.OnChange(cm.Notify)
	return mgr.Add(cm)
}

func (*admissionLayer) fromConfig(cfg *Config) (Layer, error) {
	if !cfg.Admission.Enabled {
		return nil, nil
	}
	a, err := newAdmission(cfg)
	if err != nil {
		return nil, err
	}
	return a, nil
}

func (*admissionLayer) AddFlags(f *pflag.FlagSet, cfg *Config) {
	a := &cfg.Admission
	f.BoolVar(&a.Enabled, "admission", a.Enabled, "run the validating admission webhook (L4)")
	f.StringVar(&a.Host, "webhook-host", a.Host, "address the webhook server listens on; empty for all")
	f.IntVar(&a.Port, "webhook-port", a.Port, "port of the webhook server (TLS)")
	f.StringVar(&a.ServiceName, "webhook-service", a.ServiceName, "Service the API server reaches the webhook by (in Portal's namespace)")
	f.BoolVar(&a.LocalURL, "webhook-local", a.LocalURL, "point the webhook configuration at https://127.0.0.1:<webhook-port> instead of the Service, for Portal running outside the cluster next to its API server")
	f.StringVar(&a.ConfigName, "webhook-config-name", a.ConfigName, "name of the ValidatingWebhookConfiguration Portal manages")
	f.StringVar(&a.CertSource, "cert-source", a.CertSource, "webhook certificate: self (issued and renewed by Portal) or cert-manager (read from --cert-secret)")
	f.StringVar(&a.CertSecret, "cert-secret", a.CertSecret, "Secret holding the webhook serving certificate")
	f.BoolVar(&a.FailOpen, "fail-open", a.FailOpen, "failurePolicy Ignore: admit requests when Portal is unreachable (default: fail closed)")
	f.StringVar(&a.ClientCAFile, "webhook-client-ca-file", a.ClientCAFile, "accept only webhook clients presenting a certificate signed by a CA in this PEM file, re-read when it changes: the API server, configured with an AdmissionConfiguration kubeConfigFile; the verdict forwarding endpoint ("+forward.Path+") takes the ServiceAccount token instead; empty accepts any client")
	f.StringSliceVar(&a.ClientAllowedNames, "webhook-client-allowed-names", a.ClientAllowedNames, "with --webhook-client-ca-file, also require the client certificate's common name or a DNS name to be one of these")
	f.IntVar(&a.MaxConcurrentEvaluations, "webhook-max-concurrent-evaluations", a.MaxConcurrentEvaluations, "admission requests evaluated at once; the others wait, queued per namespace and served round-robin, until their deadline (0: twice GOMAXPROCS)")
	f.IntVar(&a.MaxWaitingPerNamespace, "webhook-max-waiting-per-namespace", a.MaxWaitingPerNamespace, "admission requests of one namespace that may wait for an evaluation slot; more are answered 429 at once")
}

func (*admissionLayer) CheckFlags(cfg *Config) error {
	if cfg.Admission.MaxConcurrentEvaluations < 0 {
		return errors.New("--webhook-max-concurrent-evaluations must not be negative (0: twice GOMAXPROCS)")
	}
	if cfg.Admission.MaxWaitingPerNamespace < 1 {
		return errors.New("--webhook-max-waiting-per-namespace must be at least 1")
	}
	if len(cfg.Admission.ClientAllowedNames) > 0 && cfg.Admission.ClientCAFile == "" {
		return errors.New("--webhook-client-allowed-names needs --webhook-client-ca-file: names are only checked on certificates that CA signed")
	}
	return nil
}
