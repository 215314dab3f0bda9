// Package findings is Portal's one findings pipeline: every part of Portal
// that finds something wrong with the cluster (audit today; NetworkPolicy
// analysis, response actions and admission's warn and dryrun verdicts next)
// publishes into it under its own producer name, and the output sinks
// (PolicyReports, Alertmanager, the violations gauge, the log) run once per
// process, fed by it.
//
// The contract is state-based, not event-based (docs/adr/0007): a producer
// says what is true now for an object, or, with a full batch, for everything
// it watches. The pipeline keeps the current findings of every producer, so
// a sink that starts (a replica that becomes the leader) first receives the
// full current state of every producer, and a sink that falls behind sees the
// latest state of each object once. A producer's full batch replaces only
// that producer's findings: the others' stay in the reports and alerts.
//
// Producers cannot reach one another's findings: a Producer handle reads and
// writes only the findings registered under its own name, and stamps that
// name on every finding it publishes (core.Finding.Producer), which the sinks
// show as the result's source and the alert's producer label.
//
// Wiring, with mgr a controller-runtime manager:
//
//	p, err := findings.New(mgr, findings.Options{Sinks: sinks})
//	audit, err := p.Register("audit", findings.ProducerOptions{Synced: synced})
//	audit.Set(ref, fs, observed)
package findings

import (
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/vilaca/portal/internal/core"
)

// Defaults of Options.
const (
	DefaultMaxBatch   = 1000
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = 30 * time.Second
)

// Options configure the pipeline.
type Options struct {
	// Sinks receive the findings of every producer. Leader-only unless a
	// sink says otherwise (see core.OutputSink).
	Sinks []core.OutputSink
	// MaxBatch bounds the objects of one incremental batch. Default
	// DefaultMaxBatch.
	MaxBatch int
	// MinBackoff and MaxBackoff bound the doubling delay before a batch a
	// sink failed to publish is retried. Defaults DefaultMinBackoff and
	// DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Logger, default slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics. Default: controller-runtime's
	// metrics.Registry.
	Registerer prometheus.Registerer
	// Clock times the retries and the event-to-report latency. Default
	// clock.RealClock{}.
	Clock clock.WithTicker
}

// RuleCounter receives a producer's open violation counts for rule status;
// *rule.StatusCounts is one.
type RuleCounter interface {
	// Evaluated counts one evaluation of r on one object.
	Evaluated(r *core.Rule)
	// SetViolations sets the number of open violations of r.
	SetViolations(r *core.Rule, n int)
}

// ProducerOptions configure one producer.
type ProducerOptions struct {
	// Synced is closed once the producer holds the full current state (for
	// audit: its informers listed and evaluated every object). The sinks
	// start after every producer's Synced, so a new leader's first batch is
	// complete. nil: the producer is synced at once.
	Synced <-chan struct{}
	// Counter, when set, receives the producer's open violations per rule.
	Counter RuleCounter
	// Exemptions, when set, receives how many objects each exception
	// exempts in the producer's findings.
	Exemptions ExemptionCounter
}

// ExemptionCounter receives a producer's count of the objects each
// exception exempts now (that have a skip finding naming it); it is called
// under the pipeline's lock, so it must not block. *exception.Loader is
// one.
type ExemptionCounter interface {
	SetExempted(x *core.Exception, n int)
}

// Adder is the part of a controller-runtime manager the pipeline needs: it
// adds one runnable per sink.
type Adder interface {
	Add(manager.Runnable) error
}

// Pipeline holds the current findings of every producer and feeds the sinks.
// Every replica keeps one, fed by its own producers, so a replica that
// becomes the leader publishes the full current state at once.
type Pipeline struct {
	clock   clock.WithTicker
	metrics *Metrics
	log     *slog.Logger

	mu        sync.Mutex
	producers map[string]*Producer
	frozen    bool
	objects   map[core.ObjectKey]*object
	subs      map[*Subscription]struct{}
}

// object is the findings of one object, per producer.
type object struct {
	ref core.ResourceRef
	// parts are the producers' findings, ordered by producer name; merged
	// is their concatenation, what the sinks see.
	parts  []part
	merged []core.Finding
}

type part struct {
	producer *Producer
	findings []core.Finding
}

// producerName is what a producer may be called: it becomes a report's
// result source ("portal-" + name) and an alert label.
// At most 32 bytes, checked apart: a counted repetition compiles to a copy
// of the class per count.
var producerName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// New returns a pipeline and adds one runner per sink to mgr.
func New(mgr Adder, o Options) (*Pipeline, error) {
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(DefaultMaxBackoff, o.MinBackoff)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registerer == nil {
		o.Registerer = metrics.Registry
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	p := &Pipeline{
		clock:     o.Clock,
		metrics:   NewMetrics(o.Registerer),
		log:       o.Logger,
		producers: map[string]*Producer{},
		objects:   map[core.ObjectKey]*object{},
		subs:      map[*Subscription]struct{}{},
	}
	names := map[string]bool{}
	leading := &leadGauge{gauge: p.metrics.Leader}
	for _, sk := range o.Sinks {
		if names[sk.Name()] {
			return nil, fmt.Errorf("findings: two sinks named %q", sk.Name())
		}
		names[sk.Name()] = true
		if needLeader(sk) {
			leading.want++
		}
	}
	for _, sk := range o.Sinks {
		err := mgr.Add(&sinkRunner{
			sink: sk, pipeline: p, metrics: p.metrics, log: o.Logger,
			maxBatch: o.MaxBatch, leading: leading,
			retry: wait.Backoff{Duration: o.MinBackoff, Factor: 2, Cap: o.MaxBackoff, Steps: math.MaxInt32},
		})
		if err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Metrics returns the pipeline's metrics.
func (p *Pipeline) Metrics() *Metrics { return p.metrics }

// Register adds a producer. Every producer registers before the manager
// starts, under a name of its own: lower-case letters, digits and dashes,
// at most 32 characters.
func (p *Pipeline) Register(name string, o ProducerOptions) (*Producer, error) {
	if len(name) > 32 || !producerName.MatchString(name) {
		return nil, fmt.Errorf("findings: producer name %q is not 1 to 32 lower-case letters, digits and inner dashes", name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		return nil, fmt.Errorf("findings: producer %q registered after the sinks started; register in a layer's Setup", name)
	}
	if p.producers[name] != nil {
		return nil, fmt.Errorf("findings: producer %q is already registered", name)
	}
	pr := &Producer{
		pipeline: p, name: name, synced: o.Synced, counter: o.Counter, exemptions: o.Exemptions,
		keys: map[core.ObjectKey]struct{}{}, open: map[core.FindingID]int{}, exempted: map[string]int{},
		gauge: p.metrics.Objects.WithLabelValues(name),
	}
	pr.gauge.Set(0)
	p.producers[name] = pr
	return pr, nil
}

// waitSynced closes registration and waits until every producer holds its
// full state. It reports false when done ends first.
func (p *Pipeline) waitSynced(done <-chan struct{}) bool {
	p.mu.Lock()
	p.frozen = true
	var chans []<-chan struct{}
	for _, pr := range p.producers {
		if pr.synced != nil {
			chans = append(chans, pr.synced)
		}
	}
	p.mu.Unlock()
	for _, ch := range chans {
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
	return true
}

// Len returns the number of objects with findings of any producer.
func (p *Pipeline) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.objects)
}

// Snapshot returns the state of every object with findings, every
// producer's findings together, as the sinks see it.
func (p *Pipeline) Snapshot() []core.ObjectFindings {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]core.ObjectFindings, 0, len(p.objects))
	for _, o := range p.objects {
		out = append(out, core.ObjectFindings{Object: o.ref, Findings: o.merged})
	}
	return out
}

// partOf returns the findings pr holds on o.
func (o *object) partOf(pr *Producer) []core.Finding {
	for _, pt := range o.parts {
		if pt.producer == pr {
			return pt.findings
		}
	}
	return nil
}

// setPart replaces pr's findings on o (none removes them) and rebuilds the
// merged list.
func (o *object) setPart(pr *Producer, fs []core.Finding) {
	i := slices.IndexFunc(o.parts, func(pt part) bool { return pt.producer == pr })
	switch {
	case i >= 0 && len(fs) == 0:
		o.parts = slices.Delete(o.parts, i, i+1)
	case i >= 0:
		o.parts[i].findings = fs
	case len(fs) > 0:
		at, _ := slices.BinarySearchFunc(o.parts, pr.name, func(pt part, name string) int {
			switch {
			case pt.producer.name < name:
				return -1
			case pt.producer.name > name:
				return 1
			}
			return 0
		})
		o.parts = slices.Insert(o.parts, at, part{producer: pr, findings: fs})
	}
	switch len(o.parts) {
	case 0:
		o.merged = nil
	case 1:
		o.merged = o.parts[0].findings
	default:
		merged := make([]core.Finding, 0, len(o.merged)+len(fs))
		for _, pt := range o.parts {
			merged = append(merged, pt.findings...)
		}
		o.merged = merged
	}
}

func (p *Pipeline) markLocked(key core.ObjectKey, observed time.Time) {
	for sub := range p.subs {
		sub.markLocked(key, observed)
	}
}
