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
package alertmanager

import (
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
}

// Sink sends alerts. It runs on the leader.
type Sink struct {
	o       Options
	url     string
	log     *slog.Logger
	metrics *Metrics
	tracker *track.Tracker

	mu        sync.Mutex
	active    map[string]alert
	pending   map[string]*pending
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
	return &Sink{
		o: o, url: u.String(), log: o.Logger, metrics: NewMetrics(o.Registerer), tracker: track.New(),
		active: map[string]alert{}, pending: map[string]*pending{}, wake: make(chan struct{}, 1),
	}, nil
}

// Name implements core.OutputSink.
func (s *Sink) Name() string { return Name }

// Metrics returns the sink's metrics.
func (s *Sink) Metrics() *Metrics { return s.metrics }

// Publish implements core.OutputSink: it records which alerts fire and which
// resolve and wakes the sender. It never blocks on Alertmanager.
func (s *Sink) Publish(_ context.Context, b core.FindingBatch) error {
	now := time.Now()
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
	s.pending[fp] = &pending{alert: a, resolved: resolved, observed: observed, seq: s.seq}
	s.metrics.Pending.Set(float64(len(s.pending)))
}

func (s *Sink) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

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
		if f.Rule != nil && f.Rule.Alert != "" {
			name = f.Rule.Alert
		}
		labels := map[string]string{
			"alertname": name,
			"rule":      f.RuleName(),
			"severity":  string(f.Severity()),
			"kind":      f.Resource.Kind,
			"name":      f.Resource.Name,
		}
		if f.Resource.Namespace != "" {
			labels["namespace"] = f.Resource.Namespace
		}
		if f.Container != "" {
			labels["container"] = f.Container
		}
		out[fingerprint(labels)] = alert{
			Labels:      labels,
			Annotations: map[string]string{"message": f.Message},
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
	resend := time.NewTicker(s.o.ResendInterval)
	defer resend.Stop()
	var backoff time.Duration
	failing := false
	for {
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		} else {
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
			case <-resend.C:
				s.mu.Lock()
				s.resendDue = true
				s.mu.Unlock()
			}
		}
		err := s.flush(ctx, delivered)
		switch {
		case err == nil && failing:
			// Alertmanager is back, possibly restarted without its
			// alerts: re-send every open one now.
			s.log.Info("alertmanager reachable again; re-sending open alerts", "url", s.url)
			failing, backoff = false, 0
			s.mu.Lock()
			s.resendDue = true
			s.mu.Unlock()
			s.signal()
		case err == nil:
			backoff = 0
		case ctx.Err() != nil:
			return
		default:
			backoff = min(max(2*backoff, s.o.MinBackoff), s.o.MaxBackoff)
			if !failing {
				s.log.Warn("alertmanager unreachable; buffering alerts", "url", s.url, "error", err)
			}
			failing = true
		}
	}
}

// flush sends every queued change, then, when due, every open alert.
func (s *Sink) flush(ctx context.Context, delivered func(time.Time)) error {
	for {
		batch := s.takePending()
		if len(batch) == 0 {
			break
		}
		alerts := make([]alert, len(batch))
		for i, p := range batch {
			alerts[i] = p.alert
		}
		err := s.post(ctx, alerts)
		var rejected *rejectedError
		if err != nil && !errors.As(err, &rejected) {
			return err
		}
		s.mu.Lock()
		for _, p := range batch {
			fp := fingerprint(p.alert.Labels)
			if cur := s.pending[fp]; cur != nil && cur.seq == p.seq {
				delete(s.pending, fp)
			}
		}
		s.metrics.Pending.Set(float64(len(s.pending)))
		s.mu.Unlock()
		if err != nil {
			s.log.Error("alertmanager rejected alerts; dropped", "alerts", len(batch), "error", err)
			continue
		}
		for _, p := range batch {
			s.metrics.Sent.WithLabelValues(state(p.resolved)).Inc()
			if delivered != nil && !p.observed.IsZero() {
				delivered(p.observed)
			}
		}
	}
	return s.resend(ctx)
}

func (s *Sink) takePending() []*pending {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*pending, 0, min(len(s.pending), s.o.BatchSize))
	for _, p := range s.pending {
		if len(out) == s.o.BatchSize {
			break
		}
		cp := *p
		out = append(out, &cp)
	}
	return out
}

// resend sends every open alert when a re-send is due.
func (s *Sink) resend(ctx context.Context) error {
	s.mu.Lock()
	if !s.resendDue {
		s.mu.Unlock()
		return nil
	}
	alerts := slices.Collect(maps.Values(s.active))
	s.mu.Unlock()
	for start := 0; start < len(alerts); start += s.o.BatchSize {
		chunk := alerts[start:min(start+s.o.BatchSize, len(alerts))]
		var rejected *rejectedError
		if err := s.post(ctx, chunk); err != nil && !errors.As(err, &rejected) {
			return err
		}
		s.metrics.Sent.WithLabelValues("firing").Add(float64(len(chunk)))
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
