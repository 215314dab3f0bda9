package certs

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vilaca/portal/internal/pki"
)

// certManagerData is a Secret as cert-manager's CA issuer writes it: no
// ca.key, and here a certificate Portal's own source would renew at once.
func certManagerData(t *testing.T, ns string, from *pki.Bundle, newCA bool) map[string][]byte {
	t.Helper()
	p := pki.Policy{DNSNames: ServiceDNSNames("portal-webhook", ns), IPAddresses: localhost,
		Validity: 7 * 24 * time.Hour, CAValidity: 365 * 24 * time.Hour}
	data := issue(t, p, from, pki.Plan{NewCA: newCA, NewServing: true})
	delete(data, pki.KeyCAKey)
	return data
}

func TestCertManagerSourceOnlyReads(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	writeSecret(t, ns, corev1.SecretTypeTLS, certManagerData(t, ns, pki.Read(nil), true))
	sec, _ := getSecret(t, ns)
	rv := sec.ResourceVersion

	opts := Options{Namespace: ns, Source: SourceCertManager, WebhookConfigurations: []string{vwcName(ns)}}
	r := start(t, opts, "")
	url, calls := webhookServer(t, r.c)
	createVWC(t, ns, url, nil)
	eventually(t, "Ready", r.c.Ready)
	want := secretBundle(t, ns)
	eventually(t, "the Secret's certificate served", func() bool { return want.Serving.Leaf.Equal(r.served()) })
	eventually(t, "caBundle injected from ca.crt", func() bool { return vwcBundlesEqual(t, vwcName(ns), want.CABundle()) })
	eventually(t, "the webhook admits through the API server", func() bool { return admitsThroughWebhook(ns, calls) })

	// A certificate due for renewal is left alone: Portal does not write.
	never(t, "a write to the Secret", 2*time.Second, func() bool {
		s, ok := getSecret(t, ns)
		return !ok || s.ResourceVersion != rv
	})
	if n := r.metrics.renewals(); n != 0 {
		t.Errorf("portal_cert_renewals_total = %v with cert-manager", n)
	}

	// cert-manager renews (here with a new CA too): the new certificate is
	// served without a restart and the caBundle follows.
	writeSecret(t, ns, corev1.SecretTypeTLS, certManagerData(t, ns, pki.Read(nil), true))
	next := secretBundle(t, ns)
	eventually(t, "the renewed certificate served", func() bool { return next.Serving.Leaf.Equal(r.served()) })
	eventually(t, "caBundle follows ca.crt", func() bool { return vwcBundlesEqual(t, vwcName(ns), next.CABundle()) })

	// A deleted Secret is not recreated; the last certificate stays served.
	if err := env.client.Delete(ctx, &corev1.Secret{ObjectMeta: metaName(ns)}); err != nil {
		t.Fatal(err)
	}
	never(t, "the Secret recreated", 2*time.Second, func() bool {
		_, ok := getSecret(t, ns)
		return ok
	})
	if !r.c.Ready() || !next.Serving.Leaf.Equal(r.served()) {
		t.Error("the deleted Secret stopped the served certificate")
	}
}

func TestGarbageSecret(t *testing.T) {
	garbage := map[string][]byte{
		pki.KeyServingCert: []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"),
		pki.KeyServingKey:  []byte("garbage"),
		pki.KeyCABundle:    []byte("\x00\x01\x02"),
	}

	t.Run("self source replaces it", func(t *testing.T) {
		ns := newNamespace(t)
		writeSecret(t, ns, corev1.SecretTypeTLS, garbage)
		r := start(t, selfOptions(ns), "")
		eventually(t, "Ready", r.c.Ready)
		b := secretBundle(t, ns)
		if b == nil {
			t.Fatal("the Secret was not repaired")
		}
		verifyHosts(t, b, "127.0.0.1")
		eventually(t, "Event "+ReasonRenewed, func() bool { return hasEvent(t, ns, DefaultSecretName, ReasonRenewed) })
	})

	t.Run("self source recreates a Secret of the wrong type", func(t *testing.T) {
		ns := newNamespace(t)
		writeSecret(t, ns, corev1.SecretTypeOpaque, garbage)
		sec, _ := getSecret(t, ns)
		r := start(t, selfOptions(ns), "")
		eventually(t, "Ready", r.c.Ready)
		now, _ := getSecret(t, ns)
		if now.UID == sec.UID || now.Type != corev1.SecretTypeTLS {
			t.Errorf("Secret %s of type %q; want a new kubernetes.io/tls Secret", now.UID, now.Type)
		}
	})

	t.Run("cert-manager source reports it", func(t *testing.T) {
		ns := newNamespace(t)
		writeSecret(t, ns, corev1.SecretTypeTLS, garbage)
		sec, _ := getSecret(t, ns)
		r := start(t, Options{Namespace: ns, Source: SourceCertManager}, "")
		eventually(t, "Event "+ReasonInvalid, func() bool { return hasEvent(t, ns, DefaultSecretName, ReasonInvalid) })
		if err := r.c.Check(nil); err == nil || !strings.Contains(err.Error(), "no serving certificate") {
			t.Errorf("readiness with a garbage Secret: %v", err)
		}
		if now, _ := getSecret(t, ns); now.ResourceVersion != sec.ResourceVersion {
			t.Error("the cert-manager source wrote the Secret")
		}
		// Fixing the Secret makes the replica ready.
		writeSecret(t, ns, corev1.SecretTypeTLS, certManagerData(t, ns, pki.Read(nil), true))
		eventually(t, "Ready once fixed", r.c.Ready)
	})
}
