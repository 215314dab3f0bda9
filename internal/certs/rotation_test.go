package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vilaca/portal/internal/pki"
)

// TestRotationWithoutFailedRequests serves GetCertificate over real TLS and
// walks the certificates through an initial issuance, serving renewals and a
// full CA rotation, on a fake clock. The client stands in for the API server:
// it trusts CABundle(), and its trust may lag the server's swap or run ahead
// of it (the caBundle injection and the replicas' reloads race). At every
// change every ordering gets requests, and none may fail.
func TestRotationWithoutFailedRequests(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(epoch)
	c, err := New(Options{
		Namespace: "portal-system", DNSNames: testDNS, IPAddresses: testIPs,
		CAValidity: 200 * 24 * time.Hour, Clock: clk,
		Log: slog.New(slog.DiscardHandler), Metrics: NewMetrics(nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, c)

	// Walk the policy's own schedule until a CA rotation has completed.
	states, times, kinds := []*pki.Bundle{}, []time.Time{}, []string{}
	var b *pki.Bundle = pki.Read(nil)
	sawDrop := false
	for i := 0; !sawDrop; i++ {
		if i > 20 {
			t.Fatal("no complete CA rotation after 20 changes")
		}
		pl := c.policy.Decide(clk.Now(), b)
		if !pl.Changes() {
			clk.SetTime(pl.Next)
			continue
		}
		data, err := c.policy.Issue(clk.Now(), b, pl)
		if err != nil {
			t.Fatal(err)
		}
		if b, err = pki.Parse(data); err != nil {
			t.Fatal(err)
		}
		sawDrop = pl.DropOldCAs
		states, times = append(states, b), append(times, clk.Now())
		kinds = append(kinds, fmt.Sprintf("ca=%v serving=%v drop=%v", pl.NewCA, pl.NewServing, pl.DropOldCAs))
	}
	n := len(kinds)
	if n < 5 || kinds[n-3] != "ca=true serving=false drop=false" ||
		kinds[n-2] != "ca=false serving=true drop=false" || kinds[n-1] != "ca=false serving=false drop=true" {
		t.Fatalf("changes %q: want issuance, renewals, then the three CA rotation steps", kinds)
	}
	t.Logf("changes: %q", kinds)

	requests, failures := 0, 0
	send := func(server, trust *pki.Bundle, host string) error {
		c.swap(server)
		requests++
		return get(addr, host, trust.CABundle(), clk.Now)
	}
	hosts := []string{testDNS[2], "127.0.0.1"}
	c.swap(states[0])
	for k := 1; k < len(states); k++ {
		prev, next := states[k-1], states[k]
		clk.SetTime(times[k])
		for _, server := range []*pki.Bundle{prev, next} {
			for _, trust := range []*pki.Bundle{prev, next} {
				for i := range 10 {
					if err := send(server, trust, hosts[i%2]); err != nil {
						failures++
						t.Errorf("change %d, server at %d, client trusting %d: %v",
							k, k-boolInt(server == prev), k-boolInt(trust == prev), err)
					}
				}
			}
		}
	}
	if failures > 0 || requests < 100 {
		t.Fatalf("%d of %d requests failed across %d changes", failures, requests, len(states)-1)
	}

	// The test can fail: a client that only trusts the old CA rejects the
	// serving certificate of the new one (what skipping step 1 would do).
	before, after := states[len(states)-4], states[len(states)-1]
	clk.SetTime(times[len(states)-1])
	if err := send(after, before, hosts[0]); err == nil {
		t.Fatal("a client trusting only the old CA accepted the new CA's certificate")
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// serveTLS serves "ok" over TLS with c's certificate on 127.0.0.1.
func serveTLS(t *testing.T, c *Controller) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{}
	c.ConfigureTLS(cfg)
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0), // the failing handshake below is expected
	}
	srv.SetKeepAlivesEnabled(false)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("server: %v", err)
		}
	})
	return ln.Addr().String()
}

// get makes one request to addr with a fresh TLS handshake, trusting only
// caPEM and verifying host at the time now returns.
func get(addr, host string, caPEM []byte, now func() time.Time) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("no CA to trust")
	}
	client := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: host, Time: now, MinVersion: tls.VersionTLS12},
		},
	}
	resp, err := client.Get("https://" + addr + "/")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || string(body) != "ok" {
		return fmt.Errorf("status %d body %q", resp.StatusCode, body)
	}
	return nil
}
