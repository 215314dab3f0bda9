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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"
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
	Name       = "policyreport"
	FieldOwner = "portal"
	// Source is the top-level source of an OpenReports report, which holds
	// the results of every producer; each result's own source names its
	// producer (ResultSource).
	Source = "portal"
	// PropertyResultID is the result property holding the finding's stable
	// ID (core.Finding.ResultID), by which Policy Reporter tells results
	// apart across report rewrites.
	PropertyResultID = "resultID"
	// PropertyException names the exception behind a skip result
	// ("PortalException billing/legacy-billing"), and on a failure, the
	// exception that keeps the rule's actions off the object.
	PropertyException = "exception"
	ReportName        = "portal"
	LabelManagedBy    = "app.kubernetes.io/managed-by"
	ManagedBy         = "portal"
	LabelShard        = "portal.io/shard"
	// LabelWriter names the writer of a report: Options.Name.
	LabelWriter = "portal.io/report-writer"

	// DefaultMaxResults bounds the results of one report. Small reports
	// apply fast: every change rewrites its whole report, and an apply
	// costs the API server in proportion to the report's size. In the
	// audit benchmark (10,000 pods) event-to-report p99 was 3.8 s with
	// 1,000-result reports, 0.94 s with 100 and 0.59 s with 50; 25 gained
	// little more for twice the objects (docs/performance.md).
	DefaultMaxResults = 50
	// MaxShards bounds the shard number of a report Portal adopts: five
	// million results of one namespace at the default, and a slice of
	// 800 KB at most, where a tenant's report labelled shard 10,000,000
	// cost the leader 403 MiB.
	MaxShards = 100_000
	// DefaultMaxBytes bounds the encoded size of one report, well below the
	// API server's 1.5 MiB object limit.
	DefaultMaxBytes = 768 << 10
	// MaxMessageBytes bounds one result's message.
	MaxMessageBytes = 1024
	// DefaultRetryMin and DefaultRetryMax bound the backoff of a report
	// whose write failed.
	DefaultRetryMin = 500 * time.Millisecond
	DefaultRetryMax = 30 * time.Second
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
	// RetryMin and RetryMax bound the backoff before a report whose write
	// failed is written again (doubling from RetryMin). Defaults
	// DefaultRetryMin, DefaultRetryMax.
	RetryMin, RetryMax time.Duration
	// Logger, default slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Clock orders and holds back the writes. Default clock.RealClock{}.
	Clock clock.WithTicker
	// Name names this writer's reports (Name, Name-1, ...) and is the
	// value of their LabelWriter. Two instances that write reports at once
	// (split Deployments, one audit log reader per control-plane node)
	// need different names: each adopts, rewrites and deletes only its
	// own. Default ReportName; New passes it through WriterName.
	Name string
	// Owner, when set, is put in every report's ownerReferences, so that the
	// API server's garbage collector deletes the reports with their owner:
	// a writer per control-plane node owns its reports by its Node
	// (NodeOwner), whose reports no other writer would ever adopt once the
	// node is replaced. Optional.
	Owner *metav1.OwnerReference
}

// Sink writes PolicyReports and ClusterPolicyReports. It runs on the leader.
//
// Publish only updates the in-memory model and marks the reports whose
// results changed; Run's writers apply them in the background, the report
// dirty longest first, each report written by one writer at a time with the
// content current when its write starts. A slow write therefore holds up
// only its own report, and changes that arrive while a report is being
// written are coalesced into its next write.
type Sink struct {
	o       Options
	names   names
	owners  []metav1.OwnerReference
	format  format
	lim     limits
	log     *slog.Logger
	metrics *Metrics

	mu     sync.Mutex
	scopes map[string]*scope
	// changed is closed (and replaced) when a report becomes dirty, to wake
	// idle writers.
	changed chan struct{}
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
	if o.RetryMin <= 0 {
		o.RetryMin = DefaultRetryMin
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(DefaultRetryMax, o.RetryMin)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Name == "" {
		o.Name = ReportName
	}
	o.Name = WriterName(o.Name)
	if err := CheckName(o.Name); err != nil {
		return nil, fmt.Errorf("policyreport: %w", err)
	}
	var owners []metav1.OwnerReference
	if o.Owner != nil {
		if err := checkOwner(*o.Owner); err != nil {
			return nil, fmt.Errorf("policyreport: %w", err)
		}
		owners = []metav1.OwnerReference{*o.Owner}
	}
	return &Sink{
		o:       o,
		names:   names(o.Name),
		owners:  owners,
		format:  f,
		lim:     limits{results: o.MaxResults, bytes: o.MaxBytes - reportOverhead},
		log:     o.Logger,
		metrics: NewMetrics(o.Registerer, o.Format),
		scopes:  map[string]*scope{},
		changed: make(chan struct{}),
	}, nil
}

// Name implements core.OutputSink: "policyreport" or "openreports".
func (s *Sink) Name() string { return s.format.name }

// Metrics returns the sink's metrics.
func (s *Sink) Metrics() *Metrics { return s.metrics }

// Publish implements core.OutputSink: it updates the model and marks the
// reports whose results changed for Run's writers. Only a full batch can
// fail: it lists the reports on the API server first, to adopt them.
func (s *Sink) Publish(ctx context.Context, b core.FindingBatch) error {
	if b.Full {
		return s.adopt(ctx, b)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, of := range b.Objects {
		s.setLocked(of, -1)
	}
	s.wakeLocked()
	return nil
}

func (s *Sink) setLocked(of core.ObjectFindings, prefer int) {
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
	sc.set(of.Object.Key(), results, bytes, prefer, s.lim, of.Observed, s.o.Clock.Now())
}

// wakeLocked wakes every idle writer.
func (s *Sink) wakeLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// adopt rebuilds the model from a full batch and the reports on the API
// server: objects stay in the shard that already lists them, reports that
// list nothing current are deleted, and every report is rewritten once.
//
// The reports it lists carry Portal's label, which anyone who may create a
// report in a namespace can set too: a report is adopted only with a shard
// number below MaxShards that agrees with its name, and places only objects
// of its own namespace, so a tenant's fake report can neither make the
// leader allocate for a shard numbered in the billions nor move another
// namespace's findings. What it can do stays in its namespace: have Portal
// rewrite or delete that report.
func (s *Sink) adopt(ctx context.Context, b core.FindingBatch) error {
	start := s.o.Clock.Now()
	var (
		mu      sync.Mutex
		prior   = map[core.ObjectKey]int{}
		scopes  = map[string]*scope{}
		reports = 0
	)
	record := func(u *unstructured.Unstructured) {
		i, ok := s.names.shardOf(u)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		sc := scopes[u.GetNamespace()]
		if sc == nil {
			sc = newScope(u.GetNamespace())
			scopes[u.GetNamespace()] = sc
		}
		sh := sc.shardAt(i)
		sh.exists = true
		reports++
		sh.markDirty(start)
		for _, key := range listedObjects(u) {
			// Anyone who may write reports in a namespace can list any
			// object in one: only its own namespace's objects (cluster
			// objects in a cluster report) keep the place it gives them.
			if _, dup := prior[key]; !dup && key.Namespace == u.GetNamespace() {
				prior[key] = i
			}
		}
	}
	// The two kinds are listed at once: the API server can take a second
	// to answer the first list of a resource after it started.
	kinds := []string{s.format.namespaced + "List", s.format.clusterKind + "List"}
	errs := make([]error, len(kinds))
	var wg sync.WaitGroup
	for i, kind := range kinds {
		wg.Go(func() { errs[i] = s.list(ctx, kind, record) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scopes = scopes
	for _, of := range b.Objects {
		p, ok := prior[of.Object.Key()]
		if !ok {
			p = -1
		}
		s.setLocked(of, p)
	}
	s.wakeLocked()
	s.log.Info("policy reports adopted", "reports", reports, "objects", len(b.Objects), "took", s.o.Clock.Since(start))
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
