package runtime

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http/httptest"
	"testing"
	"time"
)

// testCert issues a certificate of cn signed by parent (self-signed when
// parent is nil); ca makes it able to sign.
func testCert(t *testing.T, cn string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, ca bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if ca {
		tmpl.IsCA, tmpl.BasicConstraintsValid, tmpl.KeyUsage = true, true, x509.KeyUsageCertSign
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

// TestClientCertificateVerifiedOncePerConnection: the requests of one
// connection share its certificate's verification, so a caller cannot make
// the endpoint verify a chain on every request of a kept-alive connection;
// a changed client CA verifies it again.
func TestClientCertificateVerifiedOncePerConnection(t *testing.T) {
	ca, caKey := testCert(t, "client-ca", nil, nil, true)
	leaf, _ := testCert(t, "kube-apiserver-kubelet-client", ca, caKey, false)
	stranger, _ := testCert(t, "stranger", nil, nil, false)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	r := httptest.NewRequest("POST", PathAudit, nil)
	r = r.WithContext(withConnAuth(context.Background(), nil))
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	if names, ok := verifiedNames(r, pool); !ok || len(names) == 0 || names[0] != "kube-apiserver-kubelet-client" {
		t.Fatalf("first request: %v %v, want the leaf verified", names, ok)
	}
	// What the first request verified holds for the connection: a second
	// request is not verified again (were it, this one would fail).
	r.TLS.PeerCertificates = []*x509.Certificate{stranger}
	if _, ok := verifiedNames(r, pool); !ok {
		t.Fatal("the second request of the connection was verified again")
	}
	// A reloaded client CA is a new pool: verified again, against it.
	if _, ok := verifiedNames(r, x509.NewCertPool()); ok {
		t.Fatal("after the client CA changed, the connection kept its old verification")
	}
}

// TestLongChainsRefusedBeforeVerifying: a caller's chain of more
// intermediates than a client certificate needs is refused without
// checking its signatures.
func TestLongChainsRefusedBeforeVerifying(t *testing.T) {
	ca, caKey := testCert(t, "client-ca", nil, nil, true)
	i1, k1 := testCert(t, "intermediate-1", ca, caKey, true)
	i2, k2 := testCert(t, "intermediate-2", i1, k1, true)
	leaf, _ := testCert(t, "kube-apiserver-kubelet-client", i2, k2, false)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	r := httptest.NewRequest("POST", PathAudit, nil)
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf, i2, i1}}
	if _, ok := peerNames(r, pool); ok {
		t.Fatal("a chain of two intermediates was verified")
	}
	short, _ := testCert(t, "kube-apiserver-kubelet-client", i1, k1, false)
	r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{short, i1}}
	if _, ok := peerNames(r, pool); !ok {
		t.Fatal("a chain of one intermediate was refused")
	}
}
