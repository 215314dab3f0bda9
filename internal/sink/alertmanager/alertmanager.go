// Package alertmanager is the Alertmanager sink: one alert per failing audit
// finding, sent to Alertmanager's v2 API (POST /api/v2/alerts).
//
// An alert starts (startsAt) when the finding is first seen and is re-sent
// every ResendInterval while the finding is open, each time with endsAt
// four intervals ahead, as Prometheus does: if Portal disappears, its alerts
// resolve themselves. When the finding clears, the alert is sent once more
// with endsAt set to that moment, which resolves it.
//
// Sends that fail are retried with exponential backoff. Meanwhile the
// changes wait in a bounded buffer, one entry per alert (a newer state of
// the same alert replaces the older), so findings raised while Alertmanager
// is down are delivered when it returns; once it answers again, every open
// alert is re-sent at once, in case it lost them. Only when the buffer is
// full is a change dropped (portal_alertmanager_alerts_dropped_total): a
// dropped firing alert still goes out with the next re-send, a dropped
// resolution lets the alert expire at its endsAt.
//
// A refusal (4xx) is never a reason to drop a change: it may come from a
// proxy or an authenticating gateway in front of Alertmanager, for a
// while, or from one alert Alertmanager finds invalid. A refused batch is
// split until the alerts Alertmanager refuses on their own are found; each
// of those stays queued, retried with its own backoff and reported
// (portal_alertmanager_alerts_refused_total by rule, a log line), while the
// rest of the batch goes out. When nothing at all is accepted the whole
// sink backs off, as for an unreachable Alertmanager.
package alertmanager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/sink/track"
)

// Name is the sink's name.
const Name = "alertmanager"

// DefaultAlertName is the alertname of findings whose rule sets no alert.
const DefaultAlertName = "PortalViolation"

// Defaults of Options.
const (
	DefaultResendInterval = time.Minute
	DefaultBufferSize     = 10000
	DefaultBatchSize      = 500
	DefaultMinBackoff     = 500 * time.Millisecond
	DefaultMaxBackoff     = time.Minute
	DefaultTimeout        = 10 * time.Second
)

// Options configure the sink.
type Options struct {
	// URL is Alertmanager's base URL ("http://alertmanager:9093"); alerts
	// go to URL/api/v2/alerts. Required.
	URL string
	// HTTPClient sends the alerts (TLS, auth). Default: a client with a
	// DefaultTimeout timeout.
	HTTPClient *http.Client
	// ResendInterval is how often open alerts are re-sent. Default
	// DefaultResendInterval.
	ResendInterval time.Duration
	// BufferSize bounds the alert changes waiting to be sent. Default
	// DefaultBufferSize.
	BufferSize int
	// BatchSize bounds the alerts of one request. Default DefaultBatchSize.
	BatchSize int
	// MinBackoff and MaxBackoff bound the exponential backoff between
	// failed sends. Defaults DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Logger, default slog.Default().
	Logger *slog.Logger
	// Registerer receives the metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Clock times the re-sends, the alerts' endsAt and the retries.
	// Default clock.RealClock{}.
	Clock clock.WithTicker
}

// alert is a postable alert of the v2 API.
type alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations,omitempty"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
}

// pending is a change waiting to be sent.
type pending struct {
	alert    alert
	resolved bool
	observed time.Time
	seq      uint64
	// refused is set while Alertmanager refuses this alert sent on its
	// own; it is then retried at retryAt, after a delay of its own
	// backoff, retry.
	refused bool
	retry   *wait.Backoff
	retryAt time.Time
}

// Sink sends alerts. It runs on the leader.
type Sink struct {
	o       Options
	url     string
	log     *slog.Logger
	metrics *Metrics
	tracker *track.Tracker

	mu      sync.Mutex
	active  map[string]alert
	pending map[string]*pending
	// started holds the startsAt of the alerts Alertmanager had active
	// when this sink started, sent by the replica that led before: each
	// replica sees a finding first at its own moment, and Alertmanager
	// takes the earlier startsAt of two, so without it an alert could
	// start again at a new leader.
	started map[string]time.Time
	// carried are the alerts open in this sink's first full batch, those
	// started applies to until they resolve: a finding that fires later
	// is a new alert, whatever Alertmanager still remembers of an old one.
	carried   map[string]bool
	seq       uint64
	resendDue bool
	wake      chan struct{}
}

// New returns the sink.
func New(o Options) (*Sink, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("alertmanager: URL %q is not an http(s) URL", o.URL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/api/v2/alerts"
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: DefaultTimeout}
	}
	if o.ResendInterval <= 0 {
		o.ResendInterval = DefaultResendInterval
	}
	if o.BufferSize <= 0 {
		o.BufferSize = DefaultBufferSize
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
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
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &Sink{
		o: o, url: u.String(), log: o.Logger, metrics: NewMetrics(o.Registerer), tracker: track.New(),
		active: map[string]alert{}, pending: map[string]*pending{}, started: map[string]time.Time{}, wake: make(chan struct{}, 1),
	}, nil
}

// Name implements core.OutputSink.
func (s *Sink) Name() string { return Name }

// Metrics returns the sink's metrics.
func (s *Sink) Metrics() *Metrics { return s.metrics }

// Publish implements core.OutputSink: it records which alerts fire and which
// resolve and wakes the sender. It never blocks on Alertmanager.
func (s *Sink) Publish(_ context.Context, b core.FindingBatch) error {
	now := s.o.Clock.Now()
	s.mu.Lock()
	for _, d := range s.tracker.Apply(b) {
		before, after := alertsOf(d.Old), alertsOf(d.New)
		for fp, a := range after {
			if old, ok := s.active[fp]; ok && maps.Equal(old.Annotations, a.Annotations) {
				continue
			}
			s.active[fp] = a
			s.queueLocked(fp, a, false, d.Observed)
		}
		for fp, a := range before {
			if _, still := after[fp]; still {
				continue
			}
			delete(s.active, fp)
			a.EndsAt = now
			s.queueLocked(fp, a, true, d.Observed)
		}
	}
	if b.Full && s.carried == nil {
		s.carried = make(map[string]bool, len(s.active))
		for fp := range s.active {
			s.carried[fp] = true
		}
	}
	s.metrics.Active.Set(float64(len(s.active)))
	s.mu.Unlock()
	s.signal()
	return nil
}

func (s *Sink) queueLocked(fp string, a alert, resolved bool, observed time.Time) {
	if _, ok := s.pending[fp]; !ok && len(s.pending) >= s.o.BufferSize {
		s.metrics.Dropped.Inc()
		return
	}
	s.seq++
	if old := s.pending[fp]; old != nil && old.refused {
		s.metrics.Refused.Dec()
	}
	s.pending[fp] = &pending{alert: a, resolved: resolved, observed: observed, seq: s.seq}
	s.metrics.Pending.Set(float64(len(s.pending)))
}

func (s *Sink) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Bounds of what one alert carries, whatever a rule or an object says: an
// alert name of a megabyte times 200 failing objects made one POST of
// 210 MB. Label values keep MaxLabelBytes (a Kubernetes name is at most
// 253), the message MaxMessageBytes (the engine's own bound on a message).
const (
	MaxLabelBytes   = 256
	MaxMessageBytes = core.MaxOutputMessageBytes
)

// alertsOf returns the alerts of an object's failing findings by
// fingerprint.
func alertsOf(fs []core.Finding) map[string]alert {
	out := map[string]alert{}
	for i := range fs {
		f := &fs[i]
		if f.Outcome != core.OutcomeFail {
			continue
		}
		name := DefaultAlertName
		if f.Rule != nil && f.Rule.AlertName() != "" {
			name = f.Rule.AlertName()
		}
		labels := map[string]string{
			"alertname": name,
			"rule":      f.RuleName(),
			"severity":  string(f.Severity()),
			"kind":      f.Resource.Kind,
			"name":      f.Resource.Name,
		}
		if c := f.Category(); c != "" {
			// Routes can send a whole category ("Pod Security Standards
			// (Restricted)") to one receiver.
			labels["category"] = c
		}
		if f.Rule != nil && f.Rule.Namespace != "" {
			// A PortalRule's alerts name its namespace, so a tenant's
			// rule of the same name, alert and severity as a platform
			// rule raises an alert of its own instead of merging into
			// (and rewriting the message of) the platform's.
			labels["rule_namespace"] = f.Rule.Namespace
		}
		if f.Resource.Namespace != "" {
			labels["namespace"] = f.Resource.Namespace
		}
		if f.Container != "" {
			labels["container"] = f.Container
		}
		if f.Producer != "" {
			// Two producers' findings of one rule on one object are two
			// alerts, and routes can tell the parts of Portal apart.
			labels["producer"] = f.Producer
		}
		for k, v := range labels {
			labels[k] = core.Truncate(v, MaxLabelBytes)
		}
		out[fingerprint(labels)] = alert{
			Labels:      labels,
			Annotations: map[string]string{"message": core.Truncate(f.Message, MaxMessageBytes)},
			StartsAt:    f.FirstSeen,
		}
	}
	return out
}

func fingerprint(labels map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(labels[k])
		b.WriteByte(0)
	}
	return b.String()
}

// Run implements core.RunnableSink: it sends queued changes, re-sends open
// alerts every ResendInterval and retries with backoff until ctx ends.
func (s *Sink) Run(ctx context.Context, delivered func(observed time.Time)) {
	if err := s.adoptStarts(ctx); err != nil {
		s.log.Info("alertmanager: cannot read the active alerts; open alerts keep this replica's start times", "error", err)
	}
	resend := s.o.Clock.NewTicker(s.o.ResendInterval)
	defer resend.Stop()
	retry := s.o.Clock.NewTimer(time.Hour)
	defer retry.Stop()
	// failures is the backoff while Alertmanager cannot be reached, nil
	// while it answers; backoff is the delay before the next try.
	var failures *wait.Backoff
	var backoff time.Duration
	failing := false
	for {
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return
			case <-s.o.Clock.After(backoff):
			}
		} else {
			// A refused alert waits for its own retry time; the others
			// go out as they come.
			if at, ok := s.nextRetry(); ok {
				retry.Reset(at.Sub(s.o.Clock.Now()))
			} else {
				retry.Stop()
			}
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
			case <-retry.C():
			case <-resend.C():
				s.mu.Lock()
				s.resendDue = true
				s.mu.Unlock()
			}
		}
		accepted, err := s.flush(ctx, delivered)
		switch {
		case err == nil && failing && accepted:
			// Alertmanager is back, possibly restarted without its
			// alerts: re-send every open one now.
			s.log.Info("alertmanager reachable again; re-sending open alerts", "url", s.url)
			failing, failures, backoff = false, nil, 0
			s.mu.Lock()
			s.resendDue = true
			s.mu.Unlock()
			s.signal()
		case err == nil:
			// Only retries of refused alerts were sent (and refused
			// again): no sign yet that Alertmanager is back.
			failures, backoff = nil, 0
		case ctx.Err() != nil:
			return
		default:
			if failures == nil {
				failures = s.backoff()
			}
			backoff = failures.Step()
			if !failing {
				s.log.Warn("alertmanager unreachable; buffering alerts", "url", s.url, "error", err)
			}
			failing = true
		}
	}
}

// flush sends every queued change that is due, then, when due, every open
// alert. It reports whether Alertmanager accepted any request.
func (s *Sink) flush(ctx context.Context, delivered func(time.Time)) (bool, error) {
	f := &flushing{delivered: delivered}
	for {
		batch := s.takePending(s.o.Clock.Now())
		if len(batch) == 0 {
			break
		}
		if err := s.send(ctx, batch, f); err != nil {
			return f.accepted, err
		}
	}
	err := s.resend(ctx, f)
	return f.accepted, err
}

// flushing is the state of one flush.
type flushing struct {
	delivered func(time.Time)
	// accepted is set once Alertmanager accepted a request of this flush:
	// from then on a refusal is the alerts' fault, not the endpoint's.
	accepted bool
}

// send posts batch. When Alertmanager refuses it (4xx), the batch is split
// and each half sent on its own, down to the single alerts it refuses,
// which stay queued with their own backoff: one invalid alert delays no
// other. A fresh alert refused before anything was accepted returns the
// refusal, so the sink backs off as a whole (a proxy or gateway refusing
// everything).
func (s *Sink) send(ctx context.Context, batch []*pending, f *flushing) error {
	alerts := make([]alert, len(batch))
	for i, p := range batch {
		alerts[i] = p.alert
	}
	s.mu.Lock()
	if len(s.started) > 0 && len(s.carried) > 0 {
		for i := range alerts {
			if fp := fingerprint(alerts[i].Labels); s.carried[fp] {
				if t, ok := s.started[fp]; ok {
					alerts[i].StartsAt = t
				}
			}
		}
	}
	s.mu.Unlock()
	err := s.post(ctx, alerts)
	var refused *refusedError
	switch {
	case err == nil:
		f.accepted = true
		s.sent(batch, f.delivered)
		return nil
	case !errors.As(err, &refused):
		return err
	case len(batch) > 1:
		mid := len(batch) / 2
		if err := s.send(ctx, batch[:mid], f); err != nil {
			return err
		}
		return s.send(ctx, batch[mid:], f)
	}
	wasRefused := batch[0].refused
	s.refuse(batch[0], refused)
	if !f.accepted && !wasRefused {
		// Nothing accepted yet and a fresh alert refused: the endpoint
		// may refuse everything. A retry of an alert refused before
		// says nothing new about it, so it backs off on its own.
		return err
	}
	return nil
}

// sent forgets the delivered changes, unless a newer state of the same alert
// arrived meanwhile.
func (s *Sink) sent(batch []*pending, delivered func(time.Time)) {
	s.mu.Lock()
	for _, p := range batch {
		fp := fingerprint(p.alert.Labels)
		if p.resolved {
			// The next time it fires is a new alert.
			delete(s.started, fp)
			delete(s.carried, fp)
		}
		if cur := s.pending[fp]; cur != nil && cur.seq == p.seq {
			if cur.refused {
				s.metrics.Refused.Dec()
			}
			delete(s.pending, fp)
		}
	}
	s.metrics.Pending.Set(float64(len(s.pending)))
	s.mu.Unlock()
	for _, p := range batch {
		s.metrics.Sent.WithLabelValues(state(p.resolved)).Inc()
		if delivered != nil && !p.observed.IsZero() {
			delivered(p.observed)
		}
	}
}

// refuse keeps a change Alertmanager refused on its own queued and backs it
// off; it is logged the first time, counted every time.
func (s *Sink) refuse(p *pending, err *refusedError) {
	rule := p.alert.Labels["rule"]
	s.metrics.RefusedTotal.WithLabelValues(rule).Inc()
	s.mu.Lock()
	defer s.mu.Unlock()
	fp := fingerprint(p.alert.Labels)
	cur := s.pending[fp]
	if cur == nil {
		// A re-sent open alert: queue it again so it is retried.
		if len(s.pending) >= s.o.BufferSize {
			s.metrics.Dropped.Inc()
			return
		}
		s.seq++
		cur = &pending{alert: p.alert, seq: s.seq}
		s.pending[fp] = cur
		s.metrics.Pending.Set(float64(len(s.pending)))
	} else if cur.seq != p.seq {
		// A newer state replaced it meanwhile: that one gets its own try.
		return
	}
	if !cur.refused {
		s.metrics.Refused.Inc()
		s.log.Warn("alertmanager refused an alert; keeping it queued and retrying with backoff",
			"rule", rule, "alertname", p.alert.Labels["alertname"], "namespace", p.alert.Labels["namespace"],
			"kind", p.alert.Labels["kind"], "name", p.alert.Labels["name"], "status", err.status, "error", err.body)
	}
	cur.refused = true
	if cur.retry == nil {
		cur.retry = s.backoff()
	}
	cur.retryAt = s.o.Clock.Now().Add(cur.retry.Step())
}

// takePending returns up to BatchSize queued changes that are due: fresh
// ones first, then refused ones whose retry time came, oldest first, so a
// refused alert sits at the end of a batch and the split finds the others
// accepted first.
func (s *Sink) takePending(now time.Time) []*pending {
	s.mu.Lock()
	defer s.mu.Unlock()
	var fresh, retry []*pending
	for _, p := range s.pending {
		switch {
		case !p.refused:
			fresh = append(fresh, p)
		case !p.retryAt.After(now):
			retry = append(retry, p)
		}
	}
	bySeq := func(a, b *pending) int { return cmp.Compare(a.seq, b.seq) }
	slices.SortFunc(fresh, bySeq)
	slices.SortFunc(retry, bySeq)
	all := append(fresh, retry...)
	out := make([]*pending, 0, min(len(all), s.o.BatchSize))
	for _, p := range all[:min(len(all), s.o.BatchSize)] {
		cp := *p
		out = append(out, &cp)
	}
	return out
}

// nextRetry is the earliest retry time of a refused change, if any.
func (s *Sink) nextRetry() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Time
	for _, p := range s.pending {
		if p.refused && (next.IsZero() || p.retryAt.Before(next)) {
			next = p.retryAt
		}
	}
	return next, !next.IsZero()
}

// resend sends every open alert when a re-send is due, except those queued
// as refused, which are retried on their own schedule.
func (s *Sink) resend(ctx context.Context, f *flushing) error {
	s.mu.Lock()
	if !s.resendDue {
		s.mu.Unlock()
		return nil
	}
	var batch []*pending
	for fp, a := range s.active {
		if p := s.pending[fp]; p != nil && p.refused {
			continue
		}
		batch = append(batch, &pending{alert: a})
	}
	s.mu.Unlock()
	for start := 0; start < len(batch); start += s.o.BatchSize {
		if err := s.send(ctx, batch[start:min(start+s.o.BatchSize, len(batch))], f); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.resendDue = false
	s.mu.Unlock()
	return nil
}

func state(resolved bool) string {
	if resolved {
		return "resolved"
	}
	return "firing"
}
