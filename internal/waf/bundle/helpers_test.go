package bundle_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// shared is the control plane of the Secret rotation tests, started on
// first use.
var shared devtest.Shared

func TestMain(m *testing.M) { shared.Main(m) }

func cluster(t *testing.T) *devcluster.Cluster {
	t.Helper()
	return shared.Cluster(t)
}

const bucket = "bundles"

// doc encodes a bundle of one rule with the given id.
func doc(t testing.TB, id int) []byte {
	t.Helper()
	data, err := bundle.Encode(ruleset.Bundle{
		Rules:     "SecRuleEngine On\nSecRule ARGS \"@pmFromFile words.txt\" \"id:" + itoa(id) + ",phase:2,deny,status:403\"\n",
		DataFiles: map[string][]byte{"words.txt": []byte("attack\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func itoa(i int) string { return fmtInt(i) }

func sum(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// fetcher returns a fetcher with fast backoff and its own metrics.
func fetcher(t testing.TB, opts bundle.Options) (*bundle.Fetcher, *bundle.Metrics) {
	t.Helper()
	m := bundle.NewMetrics(prometheus.NewRegistry())
	opts.Metrics = m
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if opts.InitialBackoff == 0 {
		opts.InitialBackoff = 10 * time.Millisecond
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = 50 * time.Millisecond
	}
	if opts.AttemptTimeout == 0 {
		opts.AttemptTimeout = 10 * time.Second
	}
	f, err := bundle.NewFetcher(opts)
	if err != nil {
		t.Fatal(err)
	}
	return f, m
}

// requests reads portal_waf_bundle_requests_total{op="get",outcome}.
func requests(m *bundle.Metrics, outcome string) int {
	return int(testutil.ToFloat64(m.Requests.WithLabelValues("get", outcome)))
}

func ctx(t testing.TB) context.Context { return t.Context() }

// mtlsConfig trusts ca and presents the client certificate.
func mtlsConfig(t testing.TB, ca, certPEM, keyPEM []byte) bundle.Config {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("bad CA")
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return bundle.Config{RootCAs: pool, Certificate: &cert}
}
