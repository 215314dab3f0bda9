package alertmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
)

// refusedError is Alertmanager, or a proxy in front of it, refusing a
// request (4xx). It may pass (a gateway misconfigured for a while) or be
// one alert's fault, so the alerts stay queued: see Sink.send.
type refusedError struct {
	status int
	body   string
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("alertmanager answered %d: %s", e.status, e.body)
}

// post sends alerts to Alertmanager. Firing alerts get endsAt four re-send
// intervals ahead.
func (s *Sink) post(ctx context.Context, alerts []alert) error {
	endsAt := s.o.Clock.Now().Add(4 * s.o.ResendInterval).UTC()
	out := make([]alert, len(alerts))
	for i, a := range alerts {
		if a.EndsAt.IsZero() {
			a.EndsAt = endsAt
		}
		a.StartsAt, a.EndsAt = a.StartsAt.UTC(), a.EndsAt.UTC()
		out[i] = a
	}
	body, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("encode alerts: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.o.HTTPClient.Do(req)
	if err != nil {
		s.metrics.Failures.Inc()
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch {
	case resp.StatusCode/100 == 2:
		return nil
	case resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout:
		s.metrics.Failures.Inc()
		return &refusedError{status: resp.StatusCode, body: string(msg)}
	}
	s.metrics.Failures.Inc()
	return fmt.Errorf("alertmanager answered %d: %s", resp.StatusCode, msg)
}

// Metrics are the sink's Prometheus metrics.
type Metrics struct {
	Sent         *prometheus.CounterVec
	Failures     prometheus.Counter
	Dropped      prometheus.Counter
	Pending      prometheus.Gauge
	Active       prometheus.Gauge
	RefusedTotal *prometheus.CounterVec
	Refused      prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_alertmanager_alerts_sent_total",
			Help: "Alerts Alertmanager accepted, by state (firing, including re-sends; resolved).",
		}, []string{"state"}),
		Failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_alertmanager_send_failures_total",
			Help: "Requests to Alertmanager that failed (unreachable, 4xx, 5xx); their alerts stay queued and are retried with backoff.",
		}),
		Dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "portal_alertmanager_alerts_dropped_total",
			Help: "Alert changes dropped because the buffer of unsent changes was full.",
		}),
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_alertmanager_pending_alerts",
			Help: "Alert changes waiting to be sent to Alertmanager.",
		}),
		Active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_alertmanager_active_alerts",
			Help: "Alerts firing now (open failing findings).",
		}),
		RefusedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_alertmanager_alerts_refused_total",
			Help: "Times Alertmanager refused (4xx) an alert sent on its own, by the rule of the alert; the alert stays queued and is retried with backoff.",
		}, []string{"rule"}),
		Refused: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_alertmanager_refused_alerts",
			Help: "Alert changes Alertmanager refused on their own and that wait, queued, for their next retry.",
		}),
	}
	m.Sent.WithLabelValues("firing")
	m.Sent.WithLabelValues("resolved")
	if reg != nil {
		reg.MustRegister(m.Sent, m.Failures, m.Dropped, m.Pending, m.Active, m.RefusedTotal, m.Refused)
	}
	return m
}

// maxActiveBytes bounds what adoptStarts reads of Alertmanager's answer.
const maxActiveBytes = 64 << 20

// adoptStarts reads the startsAt of the alerts Alertmanager has active
// from Portal (those with a rule label), so that this sink, a new leader,
// re-sends them as they started. Without an answer it goes on with its
// own: the alerts Alertmanager has still keep the earlier startsAt.
func (s *Sink) adoptStarts(ctx context.Context) error {
	u, err := url.Parse(s.url)
	if err != nil {
		return err
	}
	q := u.Query()
	q.Set("filter", `rule=~".+"`)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := s.o.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", s.url, resp.Status)
	}
	var active []struct {
		Labels   map[string]string `json:"labels"`
		StartsAt time.Time         `json:"startsAt"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxActiveBytes)).Decode(&active); err != nil {
		return fmt.Errorf("decode active alerts: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range active {
		if a.Labels["rule"] != "" && !a.StartsAt.IsZero() {
			// Alertmanager's API answers in milliseconds and keeps the
			// nanoseconds it was sent; the end of that millisecond is not
			// before them, so re-sending it leaves the alert's start as is.
			s.started[fingerprint(a.Labels)] = a.StartsAt.Truncate(time.Millisecond).Add(time.Millisecond - time.Nanosecond)
		}
	}
	return nil
}

// backoff is the delay of consecutive failures: doubling from MinBackoff
// up to MaxBackoff.
func (s *Sink) backoff() *wait.Backoff {
	return &wait.Backoff{Duration: s.o.MinBackoff, Factor: 2, Cap: s.o.MaxBackoff, Steps: math.MaxInt32}
}
