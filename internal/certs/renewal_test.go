package certs

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vilaca/portal/internal/pki"
)

// TestForcedExpiryIsRenewedWithoutFailedRequests is the issue's certificate
// rotation test through a real API server: while the API server keeps
// calling the webhook, a serving certificate that expires within 14 days is
// written into the Secret; Portal replaces it, the caBundle still matches,
// the webhook serves the new certificate without a restart, and no request
// fails.
func TestForcedExpiryIsRenewedWithoutFailedRequests(t *testing.T) {
	ns := newNamespace(t)
	opts := selfOptions(ns)
	opts.WebhookConfigurations = []string{vwcName(ns)}
	r := start(t, opts, "")
	url, calls := webhookServer(t, r.c)
	createVWC(t, ns, url, nil)
	eventually(t, "the webhook admits through the API server", func() bool { return admitsThroughWebhook(ns, calls) })

	stop := loadLoop(t, ns, 5000)
	before := calls.Load()
	eventually(t, "requests flowing", func() bool { return calls.Load() > before+5 })

	// Forge: same CA, a serving certificate that expires in 7 days.
	cur := secretBundle(t, ns)
	short := pki.Policy{DNSNames: opts.DNSNames, IPAddresses: localhost, Validity: 7 * 24 * time.Hour}
	sec, _ := getSecret(t, ns)
	data := issue(t, short, pki.Read(sec.Data), pki.Plan{NewServing: true})
	// The forged leaf is the one written, not read back: Portal may have
	// replaced it before the test reads the Secret again.
	written, err := pki.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	forged := written.Serving.Leaf
	writeSecret(t, ns, corev1.SecretTypeTLS, data)

	var renewed *pki.Bundle
	eventually(t, "the expiring certificate replaced", func() bool {
		b := secretBundle(t, ns)
		if b == nil || b.Serving.Leaf.Equal(forged) || time.Until(b.Serving.Leaf.NotAfter) < DefaultRenewBefore {
			return false
		}
		renewed = b
		return true
	})
	if !renewed.CAs[0].Equal(cur.CAs[0]) || len(renewed.CAs) != 1 {
		t.Error("a serving renewal changed the CA")
	}
	eventually(t, "the new certificate served from memory", func() bool { return renewed.Serving.Leaf.Equal(r.served()) })
	eventually(t, "the caBundle matches ca.crt", func() bool { return vwcBundlesEqual(t, vwcName(ns), renewed.CABundle()) })
	after := calls.Load()
	eventually(t, "requests after the renewal", func() bool { return calls.Load() > after+20 })

	requests, failures := stop()
	t.Logf("%d requests through the webhook during the renewal, %d failed", requests, failures)
	if failures > 0 {
		t.Fatalf("%d of %d requests failed", failures, requests)
	}
	eventually(t, "Event "+ReasonRenewed, func() bool { return hasEvent(t, ns, DefaultSecretName, ReasonRenewed) })
}

// TestCARotationWithoutFailedRequests starts from a CA that expires within
// CARenewBefore, already trusted by the VWC, and follows the three rotation
// steps under load: the caBundle gains the new CA, the serving certificate
// moves to it, the old CA leaves, and no request fails.
func TestCARotationWithoutFailedRequests(t *testing.T) {
	ns := newNamespace(t)
	opts := selfOptions(ns)
	opts.WebhookConfigurations = []string{vwcName(ns)}
	opts.CAOverlap = 3 * time.Second
	oldCA := pki.Policy{DNSNames: opts.DNSNames, IPAddresses: localhost, Validity: DefaultValidity, CAValidity: 20 * 24 * time.Hour}
	writeSecret(t, ns, corev1.SecretTypeTLS, issue(t, oldCA, pki.Read(nil), pki.Plan{NewCA: true, NewServing: true}))
	old := secretBundle(t, ns)

	r := start(t, opts, "")
	url, calls := webhookServer(t, r.c)
	createVWC(t, ns, url, old.CABundle())
	eventually(t, "Ready", r.c.Ready)
	stop := loadLoop(t, ns, 10000)

	sawOverlap := false
	var final *pki.Bundle
	eventually(t, "the rotation complete", func() bool {
		b := secretBundle(t, ns)
		if b == nil {
			return false
		}
		if len(b.CAs) == 2 && vwcBundlesEqual(t, vwcName(ns), b.CABundle()) {
			sawOverlap = true
		}
		if len(b.CAs) != 1 || b.CAs[0].Equal(old.CAs[0]) || b.Serving.Leaf.CheckSignatureFrom(b.CAs[0]) != nil {
			return false
		}
		final = b
		return true
	})
	eventually(t, "the final caBundle injected", func() bool { return vwcBundlesEqual(t, vwcName(ns), final.CABundle()) })
	eventually(t, "the final certificate served", func() bool { return final.Serving.Leaf.Equal(r.served()) })
	after := calls.Load()
	eventually(t, "requests after the rotation", func() bool { return calls.Load() > after+20 })

	requests, failures := stop()
	t.Logf("%d requests through the webhook during the CA rotation, %d failed", requests, failures)
	if failures > 0 {
		t.Fatalf("%d of %d requests failed", failures, requests)
	}
	if !sawOverlap {
		t.Error("never saw both CAs in ca.crt and the caBundle")
	}
	if n := r.metrics.renewals(); n < 3 {
		t.Errorf("portal_cert_renewals_total = %v, want at least the 3 rotation steps", n)
	}
}

// TestLeaderWritesEveryReplicaServes runs two replicas with leader election:
// both serve the same certificate, only the leader renews, and a deleted
// Secret (a forced rotation) is recreated by the leader and picked up by both.
func TestLeaderWritesEveryReplicaServes(t *testing.T) {
	ns := newNamespace(t)
	opts := selfOptions(ns)
	a, b := start(t, opts, "portal-certs"), start(t, opts, "portal-certs")
	eventually(t, "both replicas ready", func() bool { return a.c.Ready() && b.c.Ready() })
	leader, follower := a, b
	eventually(t, "a leader", func() bool {
		select {
		case <-a.mgr.Elected():
			return true
		case <-b.mgr.Elected():
			leader, follower = b, a
			return true
		default:
			return false
		}
	})
	first := secretBundle(t, ns)
	eventually(t, "both serve the Secret's certificate", func() bool {
		return first.Serving.Leaf.Equal(a.served()) && first.Serving.Leaf.Equal(b.served())
	})

	// A replica with no certificate may create a missing Secret; renewals
	// and forced rotations are the leader's alone.
	followerWrites, leaderWrites := follower.metrics.renewals(), leader.metrics.renewals()
	if err := env.client.Delete(context.Background(), &corev1.Secret{ObjectMeta: metaName(ns)}); err != nil {
		t.Fatal(err)
	}
	var second *pki.Bundle
	eventually(t, "a new Secret from the leader", func() bool {
		second = secretBundle(t, ns)
		return second != nil && !second.CAs[0].Equal(first.CAs[0])
	})
	eventually(t, "both serve the new certificate", func() bool {
		return second.Serving.Leaf.Equal(a.served()) && second.Serving.Leaf.Equal(b.served())
	})
	if len(second.CAs) != 2 || !second.CAs[1].Equal(first.CAs[0]) {
		t.Errorf("after the forced rotation ca.crt holds %d CAs; want the new one and the one replicas still trusted", len(second.CAs))
	}
	if n := follower.metrics.renewals(); n != followerWrites {
		t.Errorf("the follower wrote the Secret %v times after the forced rotation", n-followerWrites)
	}
	if n := leader.metrics.renewals(); n <= leaderWrites {
		t.Errorf("the leader did not write the Secret after the forced rotation")
	}
}
