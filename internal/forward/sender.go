package forward

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/vilaca/portal/internal/core"
)

// Defaults of SenderOptions.
const (
	DefaultQueueSize  = 1000
	DefaultTokenFile  = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	DefaultAttempts   = 8
	DefaultMinBackoff = 200 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
	requestTimeout    = 10 * time.Second
	maxTokenBytes     = 16 << 10
)

// SenderOptions configure a Sender.
type SenderOptions struct {
	// URL is the leader's forwarding endpoint: a Service that selects the
	// leader's pod alone, as the runtime Service does.
	URL string
	// TokenFile holds this replica's ServiceAccount token, read for every
	// request, since the kubelet rotates it.
	TokenFile string
	// CABundle returns the PEM bundle the leader's certificate must chain
	// to: the webhook certificate's CA, which every replica already holds.
	CABundle func() []byte
	// ServerName is the name the leader's certificate must bear, when the
	// URL's host is not one (a Service other than the webhook's).
	ServerName string
	// QueueSize bounds the verdicts waiting; a verdict that finds the
	// queue full is dropped and counted, never waited for.
	QueueSize int
	// Attempts, MinBackoff and MaxBackoff bound how long a batch is
	// retried (no leader yet, a leader change under way) before it is
	// given up and counted as failed.
	Attempts               int
	MinBackoff, MaxBackoff time.Duration
	Clock                  clock.WithTicker
	Logger                 *slog.Logger
	Metrics                *Metrics
}

// Sender is a core.VerdictSink that forwards the verdicts it is offered to
// the leader, asynchronously: Offer never blocks the admission request that
// produced the verdict. It is a manager runnable on every replica; on the
// leader it is never offered anything.
type Sender struct {
	o SenderOptions
	q chan queued

	// local is this replica's engine, set before Start: a batch still
	// waiting when this replica takes the lease is handed to it.
	local Local

	// bundle and client are rebuilt when the CA bundle changes (Start's
	// goroutine only).
	bundle []byte
	client *http.Client
}

// NewSender returns a sender; add it to the manager.
func NewSender(o SenderOptions) (*Sender, error) {
	if o.URL == "" || !strings.HasPrefix(o.URL, "https://") {
		return nil, fmt.Errorf("forward URL %q: want https://", o.URL)
	}
	if o.CABundle == nil {
		return nil, errors.New("forward: no CA bundle to verify the leader by")
	}
	if o.TokenFile == "" {
		o.TokenFile = DefaultTokenFile
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.Attempts <= 0 {
		o.Attempts = DefaultAttempts
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(DefaultMaxBackoff, o.MinBackoff)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	return &Sender{o: o, q: make(chan queued, o.QueueSize)}, nil
}

// queued is a verdict waiting, with the ID it is sent under.
type queued struct {
	id string
	v  core.Verdict
}

// HandOver makes s give its verdicts to l, instead of sending them, once l
// leads: a verdict forwarded during a leader change, when the old leader
// has stopped and this replica takes over, is acted on here. Call it
// before Start.
func (s *Sender) HandOver(l Local) { s.local = l }

// Offer implements core.VerdictSink. It never blocks.
func (s *Sender) Offer(v core.Verdict) {
	if v.Rule == nil {
		return
	}
	select {
	case s.q <- queued{id: newID(), v: v}:
		s.o.Metrics.Queued.Inc()
	default:
		s.o.Metrics.Dropped.WithLabelValues(DropQueueFull).Inc()
		s.o.Logger.Warn("verdict not forwarded to the leader: the forward queue is full", "audit", "action", "reason", DropQueueFull,
			"rule", v.Rule.Name, "kind", v.Resource.Kind, "namespace", v.Resource.Namespace, "name", v.Resource.Name)
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: the
// replicas that do not lead are the ones that forward.
func (*Sender) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable: it sends batches until ctx ends.
func (s *Sender) Start(ctx context.Context) error {
	for {
		var first queued
		select {
		case <-ctx.Done():
			return nil
		case first = <-s.q:
		}
		batch := []queued{first}
	fill:
		for len(batch) < MaxBatch {
			select {
			case v := <-s.q:
				batch = append(batch, v)
			default:
				break fill
			}
		}
		s.o.Metrics.Queued.Sub(float64(len(batch)))
		s.deliver(ctx, batch)
	}
}

// errRefused is an answer retrying would not change.
var errRefused = errors.New("refused")

// deliver sends batch, retrying with backoff, and counts the outcome.
func (s *Sender) deliver(ctx context.Context, batch []queued) {
	wire := Batch{Verdicts: make([]Verdict, len(batch))}
	for i := range batch {
		wire.Verdicts[i] = encode(batch[i].id, &batch[i].v)
	}
	body, err := json.Marshal(wire)
	if err != nil {
		s.fail(batch, SentRefused, err)
		return
	}
	wait := s.o.MinBackoff
	for attempt := 1; ; attempt++ {
		if s.local != nil && s.local.Leading() {
			s.handOver(batch)
			return
		}
		err = s.post(ctx, body)
		switch {
		case err == nil:
			s.o.Metrics.Forwarded.WithLabelValues(SentAccepted).Add(float64(len(batch)))
			return
		case errors.Is(err, errRefused):
			s.fail(batch, SentRefused, err)
			return
		case attempt >= s.o.Attempts:
			s.fail(batch, SentFailed, err)
			return
		}
		t := s.o.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			s.fail(batch, SentFailed, ctx.Err())
			return
		case <-t.C():
		}
		wait = min(2*wait, s.o.MaxBackoff)
	}
}

// handOver gives batch to this replica's engine, which leads now.
func (s *Sender) handOver(batch []queued) {
	for i := range batch {
		s.local.Accept(batch[i].v)
	}
	s.o.Metrics.Forwarded.WithLabelValues(SentHandedOver).Add(float64(len(batch)))
}

func (s *Sender) fail(batch []queued, result string, err error) {
	s.o.Metrics.Forwarded.WithLabelValues(result).Add(float64(len(batch)))
	s.o.Logger.Warn("verdicts not forwarded to the leader", "audit", "action", "reason", result, "verdicts", len(batch), "error", err)
}

// post sends one request; errRefused wraps the answers not worth a retry.
func (s *Sender) post(ctx context.Context, body []byte) error {
	token, err := readToken(s.o.TokenFile)
	if err != nil {
		return err
	}
	hc, err := s.httpClient()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.o.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %w", errRefused, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("forward to %s: %w", s.o.URL, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		// Rate-limited, not the leader (the Service still points at a
		// replica that just lost the lease), or a failed TokenReview.
		return fmt.Errorf("forward to %s: HTTP %d: %s", s.o.URL, resp.StatusCode, bytes.TrimSpace(msg))
	}
	return fmt.Errorf("%w: forward to %s: HTTP %d: %s", errRefused, s.o.URL, resp.StatusCode, bytes.TrimSpace(msg))
}

// httpClient is a client that trusts the current CA bundle only.
func (s *Sender) httpClient() (*http.Client, error) {
	b := s.o.CABundle()
	if s.client != nil && bytes.Equal(b, s.bundle) {
		return s.client, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New("forward: no CA certificate yet to verify the leader by")
	}
	s.bundle = bytes.Clone(b)
	s.client = &http.Client{Timeout: requestTimeout, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: s.o.ServerName, MinVersion: tls.VersionTLS12},
	}}
	return s.client, nil
}

func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("forward token: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes))
	if err != nil {
		return "", fmt.Errorf("forward token: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("forward token: %s is empty", path)
	}
	return t, nil
}

// newID is a random verdict ID.
func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
