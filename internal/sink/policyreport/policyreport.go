// Package policyreport is the PolicyReport sink: it keeps one
// wgpolicyk8s.io/v1alpha2 PolicyReport per namespace with findings, and one
// ClusterPolicyReport for cluster-scoped objects, true to the findings.
//
// Reports are updated in place with server-side apply (field owner portal),
// never duplicated. A namespace with many results is sharded across several
// reports (portal, portal-1, portal-2, ...) so that none exceeds a bounded
// number of results and bytes, far below the API server's object size
// limit. Every report carries app.kubernetes.io/managed-by=portal and
// portal.io/shard=N, so `kubectl get polr -A -l app.kubernetes.io/managed-by=portal`
// finds them all. A report's summary counts exactly the results it holds.
//
// The same sink writes openreports.io/v1alpha1 Report and ClusterReport
// instead (Options.Format), the successor format with the same results.
package policyreport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	reportsv1alpha2 "github.com/vilaca/portal/api/reports/v1alpha2"
	"github.com/vilaca/portal/internal/core"
)

// Report formats.
const (
	// FormatWGPolicy writes wgpolicyk8s.io/v1alpha2 PolicyReport and
	// ClusterPolicyReport: what Kyverno, Policy Reporter and most tools read.
	FormatWGPolicy = "wgpolicyk8s"
	// FormatOpenReports writes openreports.io/v1alpha1 Report and
	// ClusterReport, the format's successor, for newer consumers.
	FormatOpenReports = "openreports"
)

// format names the API of one report format.
type format struct {
	name        string
	gv          schema.GroupVersion
	namespaced  string
	clusterKind string
	// source is set at the top level of each report (OpenReports only).
	source bool
}

var formats = map[string]format{
	FormatWGPolicy: {name: Name, gv: reportsv1alpha2.GroupVersion, namespaced: "PolicyReport", clusterKind: "ClusterPolicyReport"},
	FormatOpenReports: {name: FormatOpenReports, gv: schema.GroupVersion{Group: "openreports.io", Version: "v1alpha1"},
		namespaced: "Report", clusterKind: "ClusterReport", source: true},
}

func (f format) kind(namespace string) string {
	if namespace == "" {
		return f.clusterKind
	}
	return f.namespaced
}

// Names and defaults.
const (
	// Name is the sink's name in the wgpolicyk8s format; in the
	// openreports format it is "openreports".
	Name           = "policyreport"
	FieldOwner     = "portal"
	Source         = "portal"
	ReportName     = "portal"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "portal"
	LabelShard     = "portal.io/shard"

	// DefaultMaxResults bounds the results of one report.
	DefaultMaxResults = 1000
	// DefaultMaxBytes bounds the encoded size of one report, well below the
	// API server's 1.5 MiB object limit.
	DefaultMaxBytes = 768 << 10
	// MaxMessageBytes bounds one result's message.
	MaxMessageBytes = 1024
	// writers bounds concurrent report writes.
	writers = 4
)

// Options configure the sink.
type Options struct {
	// Client writes the reports (server-side apply, delete). Required.
	Client client.Client
	// Reader lists the reports that exist when the sink (re)starts, so a
	// new leader adopts them: mgr.GetAPIReader(). Required.
	Reader client.Reader
	// Format is FormatWGPolicy (the default) or FormatOpenReports. Run two
	// sinks to write both.
	Format string
	// MaxResults per report. Default DefaultMaxResults.
	MaxResults int
	// MaxBytes per report (encoded). Default DefaultMaxBytes.
	MaxBytes int
	// Logger, default slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics (nil: not registered).
	Registerer prometheus.Registerer
}

// Sink writes PolicyReports and ClusterPolicyReports. It runs on the leader.
type Sink struct {
	o       Options
	format  format
	lim     limits
	log     *slog.Logger
	metrics *Metrics
	scopes  map[string]*scope
}

// New returns the sink.
func New(o Options) (*Sink, error) {
	if o.Client == nil || o.Reader == nil {
		return nil, errors.New("policyreport: Client and Reader are required")
	}
	if o.Format == "" {
		o.Format = FormatWGPolicy
	}
	f, ok := formats[o.Format]
	if !ok {
		return nil, fmt.Errorf("policyreport: format %q is not %s or %s", o.Format, FormatWGPolicy, FormatOpenReports)
	}
	if o.MaxResults <= 0 {
		o.MaxResults = DefaultMaxResults
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxBytes < 4*reportOverhead {
		return nil, fmt.Errorf("policyreport: MaxBytes %d is too small", o.MaxBytes)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Sink{
		o:       o,
		format:  f,
		lim:     limits{results: o.MaxResults, bytes: o.MaxBytes - reportOverhead},
		log:     o.Logger,
		metrics: NewMetrics(o.Registerer, o.Format),
		scopes:  map[string]*scope{},
	}, nil
}

// Name implements core.OutputSink: "policyreport" or "openreports".
func (s *Sink) Name() string { return s.format.name }

// Metrics returns the sink's metrics.
func (s *Sink) Metrics() *Metrics { return s.metrics }

// Publish implements core.OutputSink: it updates the model and writes every
// report whose results changed.
func (s *Sink) Publish(ctx context.Context, b core.FindingBatch) error {
	if b.Full {
		if err := s.adopt(ctx, b); err != nil {
			return err
		}
	} else {
		for _, of := range b.Objects {
			s.set(of, -1)
		}
	}
	return s.flush(ctx)
}

func (s *Sink) set(of core.ObjectFindings, prefer int) {
	ns := of.Object.Namespace
	sc := s.scopes[ns]
	if sc == nil {
		if len(of.Findings) == 0 {
			return
		}
		sc = newScope(ns)
		s.scopes[ns] = sc
	}
	results, bytes := renderObject(of)
	sc.set(of.Object.Key(), results, bytes, prefer, s.lim)
}

// adopt rebuilds the model from a full batch and the reports on the API
// server: objects stay in the shard that already lists them, reports that
// list nothing current are deleted, and every report is rewritten once.
func (s *Sink) adopt(ctx context.Context, b core.FindingBatch) error {
	prior := map[core.ObjectKey]int{}
	s.scopes = map[string]*scope{}
	for _, kind := range []string{s.format.namespaced + "List", s.format.clusterKind + "List"} {
		err := s.list(ctx, kind, func(u *unstructured.Unstructured) {
			i, ok := shardOf(u)
			if !ok {
				return
			}
			sc := s.scopes[u.GetNamespace()]
			if sc == nil {
				sc = newScope(u.GetNamespace())
				s.scopes[u.GetNamespace()] = sc
			}
			sh := sc.shardAt(i)
			sh.exists, sh.dirty = true, true
			for _, key := range listedObjects(u) {
				if _, dup := prior[key]; !dup {
					prior[key] = i
				}
			}
		})
		if err != nil {
			return err
		}
	}
	for _, of := range b.Objects {
		p, ok := prior[of.Object.Key()]
		if !ok {
			p = -1
		}
		s.set(of, p)
	}
	return nil
}

// list pages through the reports Portal wrote.
func (s *Sink) list(ctx context.Context, kind string, each func(*unstructured.Unstructured)) error {
	cont := ""
	for {
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(s.format.gv.WithKind(kind))
		err := s.o.Reader.List(ctx, l, client.MatchingLabels{LabelManagedBy: ManagedBy}, client.Limit(20), client.Continue(cont))
		if err != nil {
			return fmt.Errorf("list %s: %w", kind, err)
		}
		for i := range l.Items {
			each(&l.Items[i])
		}
		if cont = l.GetContinue(); cont == "" {
			return nil
		}
	}
}

// listedObjects returns the objects a report's results name.
func listedObjects(u *unstructured.Unstructured) []core.ObjectKey {
	results, _, _ := unstructured.NestedSlice(u.Object, "results")
	var out []core.ObjectKey
	for _, r := range results {
		m, _ := r.(map[string]any)
		res, _, _ := unstructured.NestedSlice(m, "resources")
		if len(res) == 0 {
			continue
		}
		ref, _ := res[0].(map[string]any)
		str := func(k string) string { v, _ := ref[k].(string); return v }
		out = append(out, core.ObjectKey{APIVersion: str("apiVersion"), Kind: str("kind"), Namespace: str("namespace"), Name: str("name")})
	}
	return out
}

type write struct {
	sc     *scope
	shard  int
	obj    *unstructured.Unstructured
	size   int
	digest string
	err    error
}

// flush writes (or deletes) every dirty shard, a few at a time. A shard
// whose write fails stays dirty for the retry.
func (s *Sink) flush(ctx context.Context) error {
	var ws []*write
	for _, sc := range s.scopes {
		for _, i := range sc.dirtyShards() {
			w := &write{sc: sc, shard: i}
			sh := sc.shards[i]
			if len(sh.objects) > 0 {
				w.obj, w.size, w.digest, w.err = buildReport(s.format, sc, i, limits{results: s.o.MaxResults, bytes: s.o.MaxBytes})
				if w.err == nil && w.digest == sh.written && sh.exists {
					sh.dirty = false
					continue
				}
			}
			ws = append(ws, w)
		}
	}
	sem := make(chan struct{}, writers)
	var wg sync.WaitGroup
	for _, w := range ws {
		if w.err != nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			w.err = s.write(ctx, w)
		})
	}
	wg.Wait()
	var errs []error
	for _, w := range ws {
		errs = append(errs, s.settle(w))
	}
	for ns, sc := range s.scopes {
		if sc.empty() {
			delete(s.scopes, ns)
		}
	}
	return errors.Join(errs...)
}

func (s *Sink) write(ctx context.Context, w *write) error {
	if w.obj == nil {
		sh := w.sc.shards[w.shard]
		if !sh.exists {
			return nil
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(s.format.gv.WithKind(s.format.kind(w.sc.namespace)))
		u.SetNamespace(w.sc.namespace)
		u.SetName(reportName(w.shard))
		s.metrics.Writes.WithLabelValues("delete").Inc()
		return client.IgnoreNotFound(s.o.Client.Delete(ctx, u))
	}
	s.metrics.Writes.WithLabelValues("apply").Inc()
	s.metrics.Size.Observe(float64(w.size))
	return s.o.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(w.obj), client.FieldOwner(FieldOwner), client.ForceOwnership)
}

// settle records the outcome of one write in the model.
func (s *Sink) settle(w *write) error {
	sh := w.sc.shards[w.shard]
	switch {
	case w.err == nil && w.obj == nil:
		w.sc.drop(w.shard)
		return nil
	case w.err == nil:
		sh.dirty, sh.exists, sh.written = false, true, w.digest
		return nil
	case gone(w.err):
		// The namespace is gone or terminating: nothing to report there;
		// its objects' deletions will follow.
		s.log.Debug("policy report not written: namespace gone", "namespace", w.sc.namespace, "report", reportName(w.shard), "error", w.err)
		sh.dirty = false
		return nil
	}
	s.metrics.Errors.Inc()
	return fmt.Errorf("write report %s/%s: %w", w.sc.namespace, reportName(w.shard), w.err)
}

func gone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)
}

// Metrics are the sink's Prometheus metrics.
type Metrics struct {
	Writes *prometheus.CounterVec
	Errors prometheus.Counter
	Size   prometheus.Histogram
}

// NewMetrics creates the metrics of one report format and registers them
// with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer, format string) *Metrics {
	fl := prometheus.Labels{"format": format}
	m := &Metrics{
		Writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "portal_policyreport_writes_total",
			Help:        "Report writes, by format (wgpolicyk8s, openreports) and operation (apply, delete).",
			ConstLabels: fl,
		}, []string{"op"}),
		Errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "portal_policyreport_write_errors_total",
			Help:        "Report writes that failed (retried), by format.",
			ConstLabels: fl,
		}),
		Size: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "portal_policyreport_size_bytes",
			Help:        "Encoded size of the reports applied, by format.",
			Buckets:     prometheus.ExponentialBuckets(1024, 2, 11),
			ConstLabels: fl,
		}),
	}
	m.Writes.WithLabelValues("apply")
	m.Writes.WithLabelValues("delete")
	if reg != nil {
		reg.MustRegister(m.Writes, m.Errors, m.Size)
	}
	return m
}
