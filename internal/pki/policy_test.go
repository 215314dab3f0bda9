package pki

import (
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"
)

var (
	testDNS = []string{"portal-webhook", "portal-webhook.portal-system", "portal-webhook.portal-system.svc", "portal-webhook.portal-system.svc.cluster.local"}
	testIPs = []net.IP{net.ParseIP("127.0.0.1")}
	epoch   = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
)

const day = 24 * time.Hour

func testPolicy() *Policy {
	return &Policy{
		DNSNames: testDNS, IPAddresses: testIPs,
		Validity: 90 * day, CAValidity: 200 * day,
		RenewBefore: 14 * day, CARenewBefore: 30 * day,
		Overlap: time.Hour,
	}
}

// step plans and carries out one change at now; it fails the test when the
// plan changes nothing.
func step(t *testing.T, p *Policy, now time.Time, b *Bundle) (*Bundle, Plan) {
	t.Helper()
	pl := p.Decide(now, b)
	if !pl.Changes() {
		t.Fatalf("at %s: no change planned, next look at %s", now, pl.Next)
	}
	data, err := p.Issue(now, b, pl)
	if err != nil {
		t.Fatal(err)
	}
	nb, err := Parse(data)
	if err != nil {
		t.Fatalf("issued Secret does not parse: %v", err)
	}
	return nb, pl
}

// settle asserts that b needs nothing at now and returns the next look.
func settle(t *testing.T, p *Policy, now time.Time, b *Bundle) time.Time {
	t.Helper()
	pl := p.Decide(now, b)
	if pl.Changes() {
		t.Fatalf("at %s: unexpected change: %v", now, pl.Why)
	}
	return pl.Next
}

func TestIssueFromNothing(t *testing.T) {
	p := testPolicy()
	b, pl := step(t, p, epoch, Read(nil))
	if !pl.NewCA || !pl.NewServing {
		t.Fatalf("plan = %+v, want a new CA and serving certificate", pl)
	}
	if err := verifyFor(b, epoch, append(append([]string{}, testDNS...), "127.0.0.1")...); err != nil {
		t.Fatal(err)
	}
	if b.CAKey == nil || len(b.CAs) != 1 {
		t.Fatalf("CA key %v, %d CAs; want the key of one CA", b.CAKey, len(b.CAs))
	}
	next := settle(t, p, epoch, b)
	if want := b.Serving.Leaf.NotAfter.Add(-p.RenewBefore); !next.Equal(want) {
		t.Errorf("next look %s, want the renewal time %s", next, want)
	}
}

func TestServingRenewalKeepsCA(t *testing.T) {
	p := testPolicy()
	b, _ := step(t, p, epoch, Read(nil))
	due := settle(t, p, epoch, b)
	settle(t, p, due.Add(-time.Second), b)
	nb, pl := step(t, p, due, b)
	if pl.NewCA || !pl.NewServing || !strings.Contains(strings.Join(pl.Why, ";"), "expires") {
		t.Fatalf("plan = %+v, want a serving renewal", pl)
	}
	if string(nb.raw[KeyCABundle]) != string(b.raw[KeyCABundle]) || string(nb.raw[KeyCAKey]) != string(b.raw[KeyCAKey]) {
		t.Error("a serving renewal changed the CA")
	}
	if nb.Serving.Leaf.SerialNumber.Cmp(b.Serving.Leaf.SerialNumber) == 0 {
		t.Error("serving certificate not replaced")
	}
}

func TestNamesChangeReissues(t *testing.T) {
	p := testPolicy()
	b, _ := step(t, p, epoch, Read(nil))
	p2 := testPolicy()
	p2.DNSNames = []string{"other.portal-system.svc"}
	nb, pl := step(t, p2, epoch.Add(time.Minute), b)
	if pl.NewCA || !pl.NewServing {
		t.Fatalf("plan = %+v, want only a new serving certificate", pl)
	}
	if err := verifyFor(nb, epoch.Add(time.Minute), "other.portal-system.svc"); err != nil {
		t.Fatal(err)
	}
}

// TestCARotationSteps walks a CA rotation: new CA first in the bundle with the
// old serving certificate kept, the serving certificate moving to the new CA
// one overlap later, the old CA leaving one overlap after that.
func TestCARotationSteps(t *testing.T) {
	p := testPolicy()
	b, _ := step(t, p, epoch, Read(nil))
	oldCA := b.CAs[0]
	now := oldCA.NotAfter.Add(-p.CARenewBefore)
	// Keep the serving certificate fresh so only the CA is due.
	b = withServing(t, p, b, now.Add(-time.Hour))
	settle(t, p, now.Add(-time.Second), b)

	b1, pl := step(t, p, now, b)
	if !pl.NewCA || pl.NewServing || len(b1.CAs) != 2 || !b1.CAs[1].Equal(oldCA) {
		t.Fatalf("step 1: plan %+v, %d CAs; want a new CA in front of the old one", pl, len(b1.CAs))
	}
	if !b1.Serving.Leaf.Equal(b.Serving.Leaf) {
		t.Fatal("step 1 replaced the serving certificate")
	}
	stepAt := settle(t, p, now, b1)
	if want := issuedAt(b1.CAs[0]).Add(p.Overlap); !stepAt.Equal(want) {
		t.Fatalf("step 2 due at %s, want %s", stepAt, want)
	}

	b2, pl := step(t, p, stepAt, b1)
	if !pl.NewServing || pl.NewCA || len(b2.CAs) != 2 || b2.Serving.Leaf.CheckSignatureFrom(b2.CAs[0]) != nil {
		t.Fatalf("step 2: plan %+v; want the serving certificate signed by the new CA", pl)
	}
	stepAt = settle(t, p, stepAt, b2)

	b3, pl := step(t, p, stepAt, b2)
	if !pl.DropOldCAs || len(b3.CAs) != 1 || !b3.CAs[0].Equal(b1.CAs[0]) {
		t.Fatalf("step 3: plan %+v, %d CAs; want the new CA alone", pl, len(b3.CAs))
	}
	if next := settle(t, p, stepAt, b3); !next.Equal(b3.Serving.Leaf.NotAfter.Add(-p.RenewBefore)) {
		t.Errorf("after the rotation the next look is %s, want the serving renewal", next)
	}
}

// withServing returns b with a serving certificate issued at now by b's CA.
func withServing(t *testing.T, p *Policy, b *Bundle, now time.Time) *Bundle {
	t.Helper()
	data, err := p.Issue(now, b, Plan{NewServing: true})
	if err != nil {
		t.Fatal(err)
	}
	return Read(data)
}

func TestBrokenPartsAreRepaired(t *testing.T) {
	p := testPolicy()
	good, _ := step(t, p, epoch, Read(nil))
	now := epoch.Add(time.Minute)
	with := func(key string, v []byte) *Bundle {
		data := map[string][]byte{}
		for k, x := range good.raw {
			data[k] = x
		}
		data[key] = v
		return Read(data)
	}
	garbage := []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
	cases := []struct {
		name               string
		b                  *Bundle
		newCA, newServing  bool
		keepsOldCAInBundle bool
	}{
		{"garbage tls.crt", with(KeyServingCert, garbage), false, true, false},
		{"tls.key of another pair", with(KeyServingKey, good.raw[KeyCAKey]), false, true, false},
		{"garbage ca.key", with(KeyCAKey, []byte("junk")), true, false, true},
		{"garbage ca.crt", with(KeyCABundle, garbage), true, true, false},
		{"empty Secret", Read(map[string][]byte{}), true, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Parse(tc.b.raw); (err == nil) != (tc.b.servingErr == nil && tc.b.caErr == nil) {
				t.Errorf("Parse error %v disagrees with the part errors", err)
			}
			nb, pl := step(t, p, now, tc.b)
			if pl.NewCA != tc.newCA || pl.NewServing != tc.newServing {
				t.Fatalf("plan %+v, want newCA=%v newServing=%v", pl, tc.newCA, tc.newServing)
			}
			if err := verifyFor(nb, now, testDNS[0]); err != nil {
				t.Fatal(err)
			}
			if got := len(nb.CAs) == 2 && nb.CAs[1].Equal(good.CAs[0]); got != tc.keepsOldCAInBundle {
				t.Errorf("old CA kept in bundle = %v, want %v", got, tc.keepsOldCAInBundle)
			}
		})
	}
}

// verifyFor checks that b's serving certificate verifies against b's CAs at
// now for each host, as a TLS client would.
func verifyFor(b *Bundle, now time.Time, hosts ...string) error {
	roots := x509.NewCertPool()
	for _, c := range b.CAs {
		roots.AddCert(c)
	}
	for _, h := range hosts {
		_, err := b.Serving.Leaf.Verify(x509.VerifyOptions{
			DNSName: h, Roots: roots, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			return err
		}
	}
	return nil
}
