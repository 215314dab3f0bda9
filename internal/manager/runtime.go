package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime/schema"
	crmanager "sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/findings"
	"github.com/vilaca/portal/internal/runtime"
)

// RuntimeConfig configures the runtime source: audit events and Falco
// alerts evaluated by rules of mode runtime.
type RuntimeConfig struct {
	Enabled bool
	// Listen is the runtime endpoint's address; "" or "0" serves none.
	Listen string
	// CertDir holds the endpoint's tls.crt and tls.key.
	CertDir string
	// ClientCAFile verifies the API server's (and Falco's) client
	// certificates; AuditTokenFile and FalcoTokenFile hold bearer tokens
	// the paths accept instead.
	ClientCAFile string
	// AuditAllowedNames and FalcoAllowedNames are the client certificate
	// identities (CN or SAN) each path accepts.
	AuditAllowedNames []string
	FalcoAllowedNames []string
	AuditTokenFile    string
	FalcoTokenFile    string
	// AuditLog is an audit log file to follow; AuditLogState records how
	// far it was read.
	AuditLog      string
	AuditLogState string

	QueueSize       int
	FalcoQueueSize  int
	Workers         int
	MaxOpenFindings int
	FindingWindow   time.Duration
	DedupWindow     time.Duration
	EvalTimeout     time.Duration
	MaxBodyBytes    int64
	MaxBatch        int
	RequestRate     float64
}

func defaultRuntime() RuntimeConfig {
	return RuntimeConfig{
		AuditLogState:     "/var/lib/portal/audit-log.offset",
		AuditAllowedNames: runtime.DefaultAuditNames(), FalcoAllowedNames: runtime.DefaultFalcoNames(),
		QueueSize: runtime.DefaultQueueSize, FalcoQueueSize: runtime.DefaultFalcoQueueSize, Workers: runtime.DefaultWorkers, MaxOpenFindings: runtime.DefaultMaxOpenFindings,
		FindingWindow: runtime.DefaultFindingWindow, DedupWindow: runtime.DefaultDedupWindow, EvalTimeout: runtime.DefaultEvalTimeout,
		MaxBodyBytes: runtime.DefaultMaxBodyBytes, MaxBatch: runtime.DefaultMaxBatch, RequestRate: runtime.DefaultRequestRate,
	}
}

// runtimeLayer is the runtime source, a producer of findings and of
// runtime verdicts for the actions.
type runtimeLayer struct{ cfg RuntimeConfig }

func (*runtimeLayer) Name() string { return "runtime" }

// metricsSections implements registeredLayer.
func (*runtimeLayer) metricsSections() []MetricsSection {
	return []MetricsSection{{"Runtime", "runtime", func(r prometheus.Registerer) { runtime.NewMetrics(r) }}}
}

// Provide says the runtime source publishes findings, so the pipeline is
// built.
func (*runtimeLayer) Provide(b *Board) error {
	Offer(b, "runtime layer", findingsProducer{})
	return nil
}

func (l *runtimeLayer) Setup(d Deps) error {
	pipeline, err := publishTo(d)
	if err != nil {
		return err
	}
	// The actions' verdict sink, when the actions layer is on.
	verdicts, err := One[core.VerdictSink](d.Board)
	if err != nil {
		return err
	}
	producer, err := pipeline.Register(runtime.ProducerName, findings.ProducerOptions{})
	if err != nil {
		return err
	}
	m := runtime.NewMetrics(d.Registerer)
	c := l.cfg
	src := runtime.NewSource(runtime.Options{
		Engine: d.Engine, Targets: d.Cache, Findings: producer, Verdicts: verdicts,
		QueueSize: c.QueueSize, FalcoQueueSize: c.FalcoQueueSize, Workers: c.Workers, MaxOpenFindings: c.MaxOpenFindings,
		FindingWindow: c.FindingWindow, DedupWindow: c.DedupWindow, EvalTimeout: c.EvalTimeout, Clock: d.Clock, Logger: d.Logger,
	}, m)
	if err := d.Manager.Add(src); err != nil {
		return err
	}
	// The pods exec'd into, attached to or named by Falco are read from
	// the shared cluster cache, never from the API server per event.
	if err := d.Manager.Add(crmanager.RunnableFunc(func(ctx context.Context) error {
		h, err := d.Cache.Acquire(clustercache.Scope{Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}})
		if err != nil {
			d.Logger.Warn("runtime: pods not cached, rules see a stub of the target pod", "error", err)
			return nil
		}
		<-ctx.Done()
		h.Release()
		return nil
	})); err != nil {
		return err
	}
	if (c.Listen == "" || c.Listen == "0") && c.AuditLog == "" {
		d.Logger.Warn("runtime: no input: set --runtime-listen (the audit webhook, Falco) or --runtime-audit-log; no runtime event will arrive")
	}
	if c.Listen != "" && c.Listen != "0" {
		srv, err := l.server(d, src, m)
		if err != nil {
			return err
		}
		if err := d.Manager.Add(srv); err != nil {
			return err
		}
	}
	if c.AuditLog != "" {
		in := runtime.NewFileInput(runtime.FileOptions{Path: c.AuditLog, StateFile: c.AuditLogState, Logger: d.Logger}, src, m)
		if err := d.Manager.Add(in); err != nil {
			return err
		}
	}
	return nil
}

func (l *runtimeLayer) server(d Deps, src *runtime.Source, m *runtime.Metrics) (*runtime.Server, error) {
	c := l.cfg
	audit, err := readToken(c.AuditTokenFile, "--runtime-audit-token-file")
	if err != nil {
		return nil, err
	}
	falco, err := readToken(c.FalcoTokenFile, "--runtime-falco-token-file")
	if err != nil {
		return nil, err
	}
	return runtime.NewServer(runtime.ServerOptions{
		Addr: c.Listen, CertDir: c.CertDir, ClientCAFile: c.ClientCAFile, AuditToken: audit, FalcoToken: falco,
		AuditNames: nonNil(c.AuditAllowedNames), FalcoNames: nonNil(c.FalcoAllowedNames),
		MaxBodyBytes: c.MaxBodyBytes, MaxBatch: c.MaxBatch, RequestRate: c.RequestRate, Logger: d.Logger,
	}, src, m)
}

// nonNil keeps an emptied list empty: nil would mean the defaults.
func nonNil(names []string) []string {
	if names == nil {
		return []string{}
	}
	return names
}

// readToken reads a bearer token file ("" when path is empty).
func readToken(path, flag string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	t := strings.TrimSpace(string(b))
	if len(t) < 16 {
		return "", fmt.Errorf("%s: the token is %d characters; use at least 16 random ones", flag, len(t))
	}
	return t, nil
}

func (*runtimeLayer) fromConfig(cfg *Config) (Layer, error) {
	if !cfg.Runtime.Enabled {
		return nil, nil
	}
	return &runtimeLayer{cfg: cfg.Runtime}, nil
}

func (*runtimeLayer) AddFlags(f *pflag.FlagSet, cfg *Config) {
	r := &cfg.Runtime
	f.BoolVar(&r.Enabled, "runtime", r.Enabled, "evaluate rules of mode runtime on the API server's audit events and Falco alerts, feeding the actions and outputs")
	f.StringVar(&r.Listen, "runtime-listen", r.Listen, "address of the runtime endpoint (HTTPS: /audit for the API server's audit webhook, /falco for Falco and Falcosidekick), e.g. :9444; empty serves none")
	f.StringVar(&r.CertDir, "runtime-cert-dir", r.CertDir, "directory with the runtime endpoint's tls.crt and tls.key, reloaded when they change")
	f.StringVar(&r.ClientCAFile, "runtime-client-ca", r.ClientCAFile, "PEM CA bundle verifying client certificates (the API server's audit webhook client certificate, Falco's mTLS one), re-read when it changes; a certificate must also bear a name its path allows")
	f.StringSliceVar(&r.AuditAllowedNames, "runtime-audit-allowed-names", r.AuditAllowedNames, "client certificate identities (subject CN, DNS or URI SAN) /audit accepts from --runtime-client-ca; any other certificate it signed (a kubelet's) is refused with 403; empty: the token only")
	f.StringSliceVar(&r.FalcoAllowedNames, "runtime-falco-allowed-names", r.FalcoAllowedNames, "client certificate identities (subject CN, DNS or URI SAN) /falco accepts from --runtime-client-ca; empty: the token only")
	f.StringVar(&r.AuditTokenFile, "runtime-audit-token-file", r.AuditTokenFile, "file holding a bearer token /audit accepts instead of a client certificate")
	f.StringVar(&r.FalcoTokenFile, "runtime-falco-token-file", r.FalcoTokenFile, "file holding a bearer token /falco accepts instead of a client certificate")
	f.StringVar(&r.AuditLog, "runtime-audit-log", r.AuditLog, "follow this API server audit log (JSON lines), across rotations, resuming where it stopped")
	f.StringVar(&r.AuditLogState, "runtime-audit-log-state", r.AuditLogState, "file recording how far --runtime-audit-log was evaluated: a restart resumes there, reading again what was read and not yet evaluated")
	f.IntVar(&r.QueueSize, "runtime-queue-size", r.QueueSize, "audit events (webhook and log file) waiting for evaluation; an event from the endpoint that finds the queue full is dropped and counted")
	f.IntVar(&r.FalcoQueueSize, "runtime-falco-queue-size", r.FalcoQueueSize, "Falco alerts waiting for evaluation, in a queue of their own so a flood of alerts never leaves audit events no room (nor the other way round); beyond, dropped and counted")
	f.IntVar(&r.Workers, "runtime-workers", r.Workers, "concurrent runtime evaluations")
	f.IntVar(&r.MaxOpenFindings, "runtime-max-open-findings", r.MaxOpenFindings, "runtime findings open at once; beyond, the oldest of the namespace holding the most closes early")
	f.DurationVar(&r.FindingWindow, "runtime-finding-window", r.FindingWindow, "how long a runtime finding stays open: its alert resolves and its report result goes after it")
	f.DurationVar(&r.DedupWindow, "runtime-dedup-window", r.DedupWindow, "a rule, actor and target raise one finding, and run their actions once, per window")
	f.DurationVar(&r.EvalTimeout, "runtime-eval-timeout", r.EvalTimeout, "deadline of one event's evaluation by every runtime rule")
	f.Int64Var(&r.MaxBodyBytes, "runtime-max-body-bytes", r.MaxBodyBytes, "largest request body the runtime endpoint reads (a Falco alert: at most 64 KiB)")
	f.IntVar(&r.MaxBatch, "runtime-max-batch", r.MaxBatch, "most events of one EventList the endpoint accepts")
	f.Float64Var(&r.RequestRate, "runtime-request-rate", r.RequestRate, "requests per second each path of the runtime endpoint (/audit, /falco) serves, each on its own; beyond, it answers 429 at once")
}

func (*runtimeLayer) CheckFlags(cfg *Config) error {
	r := &cfg.Runtime
	if !r.Enabled {
		return nil
	}
	if r.QueueSize <= 0 || r.FalcoQueueSize <= 0 || r.Workers <= 0 || r.MaxOpenFindings <= 0 || r.MaxBatch <= 0 || r.MaxBodyBytes <= 0 || r.RequestRate <= 0 {
		return errors.New("--runtime-queue-size, --runtime-falco-queue-size, --runtime-workers, --runtime-max-open-findings, --runtime-max-batch, --runtime-max-body-bytes and --runtime-request-rate must be positive")
	}
	if r.FindingWindow <= 0 || r.DedupWindow <= 0 || r.EvalTimeout <= 0 {
		return errors.New("--runtime-finding-window, --runtime-dedup-window and --runtime-eval-timeout must be positive")
	}
	if r.Listen != "" && r.Listen != "0" {
		if r.CertDir == "" {
			return errors.New("--runtime-listen needs --runtime-cert-dir: the API server only posts audit events over HTTPS")
		}
		if r.ClientCAFile == "" && r.AuditTokenFile == "" && r.FalcoTokenFile == "" {
			return errors.New("--runtime-listen needs --runtime-client-ca or a token file: the endpoint accepts no anonymous caller")
		}
		if err := runtime.CheckAllowedNames(r.AuditAllowedNames); err != nil {
			return fmt.Errorf("--runtime-audit-allowed-names: %w", err)
		}
		if err := runtime.CheckAllowedNames(r.FalcoAllowedNames); err != nil {
			return fmt.Errorf("--runtime-falco-allowed-names: %w", err)
		}
	}
	return nil
}
