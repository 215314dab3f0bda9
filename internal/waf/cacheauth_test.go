package waf_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/test/waftest"
)

// guarded creates a Ready rule set guard in a new namespace and returns the
// namespace.
func guarded(t *testing.T, prefix string) string {
	t.Helper()
	ns := namespace(t, fmt.Sprintf("%s-%d", prefix, seq()))
	create(t, source(ns, "rules", "SecRuleEngine On\n"), ruleSet(ns, "guard", []string{"rules"}))
	eventually(t, ns+"/guard in the cache", func() bool {
		_, err := env.cache.Latest(context.Background(), ns, "guard")
		return err == nil
	})
	return ns
}

var counterSeq atomic.Int64

func seq() int64 { return counterSeq.Add(1) }

// clientFor is a data plane's client: a token of ServiceAccount ns/name for
// audiences (none: the API server's own), TLS verified against the cache's
// CA.
func clientFor(t *testing.T, ns, name string, audiences ...string) *cache.Client {
	t.Helper()
	token, err := env.waf.Token(context.Background(), ns, name, audiences...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := env.waf.NewClient(token)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// readStatus reads ns/name with c and returns the HTTP status the cache
// answered (200 when it read).
func readStatus(t *testing.T, c *cache.Client, ns, name string) int {
	t.Helper()
	_, err := c.Entry(context.Background(), ns, name)
	switch {
	case err == nil:
		return 200
	case errors.Is(err, cache.ErrNotFound):
		return 404
	}
	for _, code := range []int{401, 403, 503} {
		if strings.Contains(err.Error(), fmt.Sprintf(": %d ", code)) {
			return code
		}
	}
	t.Fatalf("read %s/%s: %v", ns, name, err)
	return 0
}

// TestCacheTokens: real ServiceAccount tokens, reviewed by the real API
// server. A token for the cache's audience reads its own namespace's rule
// sets and not another's; a token for Kubernetes' own audience, or none,
// reads nothing; a token for one rule set's audience reads only that rule
// set. Refusals are counted by reason.
func TestCacheTokens(t *testing.T) {
	cluster(t)
	a, b := guarded(t, "tokens-a"), guarded(t, "tokens-b")
	m := env.layer.Cache.Metrics()
	denied := func(reason string) float64 { return testutil.ToFloat64(m.Denied.WithLabelValues(reason)) }
	forbidden, unauthenticated, noToken := denied(cache.DenyForbidden), denied(cache.DenyUnauthenticated), denied(cache.DenyNoToken)

	own := clientFor(t, a, "waf-proxy", cache.Audience)
	if code := readStatus(t, own, a, "guard"); code != 200 {
		t.Fatalf("own namespace: %d, want 200", code)
	}
	if l, err := own.Latest(context.Background(), a, "guard"); err != nil || len(l.SHA256) != 64 {
		t.Fatalf("latest %+v %v: want a sha256", l, err)
	}
	if code := readStatus(t, own, a, "missing"); code != 404 {
		t.Fatalf("own namespace, no such rule set: %d, want 404", code)
	}
	if code := readStatus(t, own, b, "guard"); code != 403 {
		t.Fatalf("other namespace: %d, want 403", code)
	}
	// Refused before the lookup: a missing rule set elsewhere looks the same.
	if code := readStatus(t, own, b, "missing"); code != 403 {
		t.Fatalf("other namespace, no such rule set: %d, want 403", code)
	}
	if got := denied(cache.DenyForbidden) - forbidden; got != 2 {
		t.Errorf("denied{forbidden} moved by %v, want 2", got)
	}

	kubeAudience := clientFor(t, a, "waf-proxy")
	if code := readStatus(t, kubeAudience, a, "guard"); code != 401 {
		t.Fatalf("token for the API server's audience: %d, want 401", code)
	}
	wrongAudience := clientFor(t, a, "waf-proxy", "vault")
	if code := readStatus(t, wrongAudience, a, "guard"); code != 401 {
		t.Fatalf("token for another audience: %d, want 401", code)
	}
	if got := denied(cache.DenyUnauthenticated) - unauthenticated; got != 2 {
		t.Errorf("denied{unauthenticated} moved by %v, want 2", got)
	}

	anonymous := clientFor(t, a, "waf-proxy", cache.Audience)
	anonymous.Token = nil
	if code := readStatus(t, anonymous, a, "guard"); code != 401 {
		t.Fatalf("no token: %d, want 401", code)
	}
	if got := denied(cache.DenyNoToken) - noToken; got != 1 {
		t.Errorf("denied{no_token} moved by %v, want 1", got)
	}

	create(t, source(a, "other", "SecRuleEngine On\n"), ruleSet(a, "other", []string{"other"}))
	eventually(t, a+"/other in the cache", func() bool { return readStatus(t, own, a, "other") == 200 })
	narrow := clientFor(t, a, "waf-proxy", cache.RuleSetAudience(a, "guard"))
	if code := readStatus(t, narrow, a, "guard"); code != 200 {
		t.Fatalf("token for the rule set's own audience: %d, want 200", code)
	}
	if code := readStatus(t, narrow, a, "other"); code != 401 {
		t.Fatalf("token for another rule set's audience: %d, want 401", code)
	}
}

// TestCacheGrantAcrossNamespaces: a ServiceAccount of another namespace
// reads a rule set once RBAC grants it get on rulesets/cache there, and
// not before. A token is reviewed once, then its decision is reused.
func TestCacheGrantAcrossNamespaces(t *testing.T) {
	cluster(t)
	a, b := guarded(t, "grant-a"), guarded(t, "grant-b")
	before := clientFor(t, b, "shared-proxy", cache.Audience)
	if code := readStatus(t, before, a, "guard"); code != 403 {
		t.Fatalf("before the grant: %d, want 403", code)
	}
	create(t,
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: a, Name: "waf-cache-read"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"waf.portal.io"}, Resources: []string{"rulesets/cache"}, Verbs: []string{"get"}, ResourceNames: []string{"guard"}}},
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: a, Name: "waf-cache-read"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "waf-cache-read"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: b, Name: "shared-proxy"}},
		},
	)
	// A new token: the refusal of the old one is remembered for a while.
	granted := clientFor(t, b, "shared-proxy", cache.Audience)
	reviews := func() float64 {
		return testutil.ToFloat64(env.layer.Cache.Metrics().Reviews.WithLabelValues("token", "allowed"))
	}
	eventually(t, "the grant to take effect", func() bool { return readStatus(t, granted, a, "guard") == 200 })
	n := reviews()
	for range 3 {
		if code := readStatus(t, granted, a, "guard"); code != 200 {
			t.Fatalf("after the grant: %d, want 200", code)
		}
	}
	if got := reviews() - n; got != 0 {
		t.Errorf("%v more TokenReviews for a token already reviewed, want 0", got)
	}
	if code := readStatus(t, granted, a, "other-name"); code != 403 {
		t.Fatalf("a rule set the Role does not name: %d, want 403", code)
	}
}

// TestCacheCertificateRotation: when the cache's certificate Secret is
// replaced (a forced rotation: delete it), the running server presents the
// new certificate on the next handshake, without a restart, and data planes
// that trust the CA keep reading.
func TestCacheCertificateRotation(t *testing.T) {
	cluster(t)
	ns := guarded(t, "rotation")
	// The CA bundle and the served certificate are read separately, so a
	// handshake may briefly fail while either side of a rotation lands (also
	// right after start, if an earlier test rotated): such a reading is "not
	// yet", and only a handshake that verifies counts.
	serial := func() (string, error) {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(env.layer.Certs.CABundle())
		conn, err := tls.Dial("tcp", env.layer.Server.Addr(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
		if err != nil {
			return "", err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
	}
	var first string
	eventually(t, "a verified serving certificate", func() bool {
		s, err := serial()
		first = s
		return err == nil
	})
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: waftest.Namespace, Name: "portal-waf-cache-cert"}}
	if err := env.client.Delete(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new verified serving certificate", func() bool {
		s, err := serial()
		return err == nil && s != first
	})
	if code := readStatus(t, env.cache, ns, "guard"); code != 200 {
		t.Fatalf("after the rotation: %d, want 200", code)
	}
}
