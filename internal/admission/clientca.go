package admission

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// ClientCARecheck is how often, at most, a handshake re-reads the client CA
// file: a rotated CA is in force within this long, and a flood of
// handshakes costs at most one file read per period.
const ClientCARecheck = 2 * time.Second

var errNoPEM = errors.New("admission: the client CA holds no PEM certificate")

// Results are the values of the result label of
// portal_admission_client_ca_reloads_total.
const (
	ClientCAReloaded = "reloaded" // the file changed and its CA is in force
	ClientCAFailed   = "failed"   // unreadable, or changed to no usable CA: the last good one stays
)

// ClientCAMetrics are the metrics of the webhook's client CA file,
// documented in docs/reference/metrics.md: a rotation that did not take
// effect, and a CA about to expire, would otherwise show only as the API
// server's calls failing.
type ClientCAMetrics struct {
	Reloads *prometheus.CounterVec
	Expiry  prometheus.Gauge
	// Refused counts, by path, the requests ClientGuard refused for want
	// of a client certificate.
	Refused *prometheus.CounterVec
}

// NewClientCAMetrics creates the metrics; Collectors lists them for
// registration.
func NewClientCAMetrics() *ClientCAMetrics {
	m := &ClientCAMetrics{
		Reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_admission_client_ca_reloads_total",
			Help: "Changes of the webhook client CA file seen by Portal, by result (reloaded; failed: unreadable or no usable certificate, the last good CA stays in force).",
		}, []string{"result"}),
		Expiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portal_admission_client_ca_expiry_timestamp_seconds",
			Help: "When the first certificate of the webhook client CA in force expires, in seconds since the epoch.",
		}),
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portal_admission_clients_refused_total",
			Help: "Requests to the webhook server refused with HTTP 401 because their connection presented no client certificate, by path. Only while the verdict forwarding endpoint, which accepts callers without one, is served; otherwise such callers fail the TLS handshake.",
		}, []string{"path"}),
	}
	m.Reloads.WithLabelValues(ClientCAReloaded)
	m.Reloads.WithLabelValues(ClientCAFailed)
	return m
}

// Collectors are the metrics to register.
func (m *ClientCAMetrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Reloads, m.Expiry, m.Refused}
}

// ClientCAOptions configure ClientAuthFile.
type ClientCAOptions struct {
	// AllowedNames are the client certificate names accepted (see
	// ClientAuth); empty accepts any the CA signed.
	AllowedNames []string
	// Logger, default slog.Default().
	Logger *slog.Logger
	// Metrics count reloads and show the CA's expiry; nil: not counted.
	Metrics *ClientCAMetrics
	// Clock decides when the file is read again (ClientCARecheck); default
	// the real clock.
	Clock clock.PassiveClock
	// Guard, when the webhook server is wrapped by it, lets the handshake
	// go without a certificate while it serves an open path; nil: the
	// handshake always demands one.
	Guard *ClientGuard
}

// ClientAuthFile is ClientAuth with the CA read from path and re-read when
// its content changes (a mounted ConfigMap or Secret updated in place), so
// a rotated CA needs no restart. A file that cannot be read or holds no
// certificate at start is an error; later, the last good CA stays in force
// and the problem is logged and counted in m (which may be nil).
func ClientAuthFile(path string, o ClientCAOptions) (func(*tls.Config), error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	ca := &fileCA{path: path, log: o.Logger.With("file", path), metrics: o.Metrics, clock: o.Clock}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool, expires, err := parseCA(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ca.pool.Store(pool)
	ca.setExpiry(expires)
	ca.last = data
	ca.next = o.Clock.Now().Add(ClientCARecheck)
	static := clientAuth(pool, o.AllowedNames, o.Guard)
	return func(c *tls.Config) {
		static(c)
		base := c
		var cached atomic.Pointer[poolConfig]
		// Runs on every handshake, after all TLS options have been
		// applied: the connection gets base with the current pool.
		c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			pool := ca.current()
			if pc := cached.Load(); pc != nil && pc.pool == pool {
				return pc.conf, nil
			}
			conf := base.Clone()
			conf.ClientCAs = pool
			conf.GetConfigForClient = nil
			cached.Store(&poolConfig{pool: pool, conf: conf})
			return conf, nil
		}
	}, nil
}

type poolConfig struct {
	pool *x509.CertPool
	conf *tls.Config
}

// fileCA is a client CA pool read from a file.
type fileCA struct {
	path    string
	log     *slog.Logger
	metrics *ClientCAMetrics
	clock   clock.PassiveClock
	pool    atomic.Pointer[x509.CertPool]

	mu      sync.Mutex // held by the one handshake re-reading the file
	next    time.Time  // when the file may be read again
	last    []byte     // the content last read, good or bad
	lastErr string     // the read error last logged
}

// current returns the pool in force, re-reading the file first when
// ClientCARecheck has passed. Handshakes never wait on the re-read: the one
// that takes the lock reads, the others use the pool as it is.
func (f *fileCA) current() *x509.CertPool {
	if f.mu.TryLock() {
		if now := f.clock.Now(); !now.Before(f.next) {
			f.next = now.Add(ClientCARecheck)
			f.reload()
		}
		f.mu.Unlock()
	}
	return f.pool.Load()
}

func (f *fileCA) reload() {
	data, err := os.ReadFile(f.path)
	if err != nil {
		if err.Error() != f.lastErr {
			f.lastErr = err.Error()
			f.log.Error("cannot re-read the webhook client CA; the last good one stays in force", "error", err)
			f.count(ClientCAFailed)
		}
		return
	}
	f.lastErr = ""
	if bytes.Equal(data, f.last) {
		return
	}
	f.last = data
	pool, expires, err := parseCA(data)
	if err != nil {
		f.log.Error("the webhook client CA file changed to something unusable; the last good one stays in force", "error", err)
		f.count(ClientCAFailed)
		return
	}
	f.pool.Store(pool)
	f.setExpiry(expires)
	f.count(ClientCAReloaded)
	f.log.Info("webhook client CA reloaded")
}

func (f *fileCA) count(result string) {
	if f.metrics != nil {
		f.metrics.Reloads.WithLabelValues(result).Inc()
	}
}

func (f *fileCA) setExpiry(t time.Time) {
	if f.metrics != nil {
		f.metrics.Expiry.Set(float64(t.Unix()))
	}
}

// parseCA reads the certificates of a PEM file as x509.CertPool's
// AppendCertsFromPEM does (CERTIFICATE blocks without headers, those that
// do not parse skipped) and returns them as a pool with the earliest
// NotAfter among them.
func parseCA(data []byte) (*x509.CertPool, time.Time, error) {
	pool := x509.NewCertPool()
	var first time.Time
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "CERTIFICATE" || len(block.Headers) != 0 {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			continue
		}
		pool.AddCert(cert)
		if first.IsZero() || cert.NotAfter.Before(first) {
			first = cert.NotAfter
		}
	}
	if first.IsZero() {
		return nil, time.Time{}, errNoPEM
	}
	return pool, first, nil
}
