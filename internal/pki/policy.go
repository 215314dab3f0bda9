package pki

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Policy decides, from what a Secret holds and the time, what the self
// source must issue. It is pure: the issuer feeds it the Secret and writes
// the result.
//
// A CA rotation runs in three steps so no client ever sees a certificate from
// a CA it does not trust yet, nor loses trust in one still being served:
//
//  1. A new CA is put first in ca.crt; the old CA stays behind it and the
//     serving certificate (signed by the old CA) is kept. The caBundles follow.
//  2. Overlap after the new CA was issued, the serving certificate is
//     re-issued by the new CA. Every client trusts both by then.
//  3. Overlap after that, the old CAs leave ca.crt. Every replica serves the
//     new certificate by then.
//
// A serving certificate that is missing, broken, names the wrong hosts or is
// due for renewal is replaced at once by the current CA; renewing it under the
// same CA never changes ca.crt, so it needs no overlap.
type Policy struct {
	// DNSNames and IPAddresses are the names a serving certificate must carry.
	DNSNames    []string
	IPAddresses []net.IP
	// Validity and CAValidity are the lifetimes of new certificates.
	Validity, CAValidity time.Duration
	// RenewBefore and CARenewBefore: replace a certificate that expires
	// within them.
	RenewBefore, CARenewBefore time.Duration
	// Overlap is the wait of CA rotation steps 2 and 3.
	Overlap time.Duration
}

// Plan is what the issuer does to a Secret at one moment.
type Plan struct {
	NewCA, NewServing, DropOldCAs bool
	// Why says, for logs and Events, what prompted each change.
	Why []string
	// Next is when the Secret needs another look if nothing else happens;
	// zero when the plan changes something (the write itself triggers a look).
	Next time.Time
}

// Changes reports whether the plan changes the Secret.
func (pl Plan) Changes() bool { return pl.NewCA || pl.NewServing || pl.DropOldCAs }

// Decide plans the next step for b at now.
func (p *Policy) Decide(now time.Time, b *Bundle) Plan {
	var pl Plan
	if why := p.caProblem(now, b); why != "" {
		pl.NewCA = true
		pl.Why = append(pl.Why, "new CA: "+why)
	}
	if why := p.servingProblem(now, b); why != "" {
		pl.NewServing = true
		pl.Why = append(pl.Why, "new serving certificate: "+why)
	}
	if pl.Changes() {
		return pl
	}
	leaf, ca := b.Serving.Leaf, b.CAs[0]
	var step time.Time
	switch {
	case leaf.CheckSignatureFrom(ca) != nil:
		// Step 2: the serving certificate still comes from an older CA.
		if step = issuedAt(ca).Add(p.Overlap); !now.Before(step) {
			pl.NewServing = true
			pl.Why = append(pl.Why, fmt.Sprintf("new serving certificate: moving to the CA issued at %s", issuedAt(ca).Format(time.RFC3339)))
			return pl
		}
	case len(b.CAs) > 1:
		// Step 3: the new CA signs what is served; retire the others.
		if step = issuedAt(leaf).Add(p.Overlap); !now.Before(step) {
			pl.DropOldCAs = true
			pl.Why = append(pl.Why, fmt.Sprintf("%d older CA(s) leave %s", len(b.CAs)-1, KeyCABundle))
			return pl
		}
	}
	pl.Next = earliest(step, leaf.NotAfter.Add(-p.RenewBefore), ca.NotAfter.Add(-p.CARenewBefore))
	return pl
}

// caProblem says why the first CA of b cannot keep signing, or "".
func (p *Policy) caProblem(now time.Time, b *Bundle) string {
	switch {
	case b.caErr != nil:
		return b.caErr.Error()
	case len(b.CAs) == 0:
		return KeyCABundle + " is missing"
	case b.caKeyErr != nil:
		return b.caKeyErr.Error()
	case b.CAKey == nil:
		return KeyCAKey + " is missing"
	case !b.CAs[0].IsCA:
		return "the first certificate of " + KeyCABundle + " is not a CA"
	case now.Before(b.CAs[0].NotBefore):
		return "the CA is not valid before " + b.CAs[0].NotBefore.Format(time.RFC3339)
	case !now.Before(b.CAs[0].NotAfter.Add(-p.CARenewBefore)):
		return fmt.Sprintf("the CA expires at %s, within %s", b.CAs[0].NotAfter.Format(time.RFC3339), p.CARenewBefore)
	}
	if err := p.probe(now, b.CAs[0], b.CAKey); err != nil {
		return "the CA cannot issue a certificate clients accept: " + err.Error()
	}
	return ""
}

// probe signs a throwaway serving certificate with the CA and verifies it
// as a client would. Anything Portal did not write itself (a critical
// extension, name constraints, a CA restricted to client auth) can make every
// certificate the CA issues useless; this finds out before one is served.
func (p *Policy) probe(now time.Time, ca *x509.Certificate, key crypto.Signer) error {
	tmpl := servingTemplate(big.NewInt(1), now, now.Add(time.Hour), p.DNSNames, p.IPAddresses)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, ca.PublicKey, key)
	if err != nil {
		return err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

// servingProblem says why b's serving certificate must be replaced now, or "".
func (p *Policy) servingProblem(now time.Time, b *Bundle) string {
	if b.Serving == nil {
		if b.servingErr != nil {
			return b.servingErr.Error()
		}
		return KeyServingCert + " is missing"
	}
	leaf := b.Serving.Leaf
	switch {
	case !sansMatch(leaf, p.DNSNames, p.IPAddresses):
		return fmt.Sprintf("it names %v %v, want %v %v", leaf.DNSNames, leaf.IPAddresses, p.DNSNames, p.IPAddresses)
	case !now.Before(leaf.NotAfter.Add(-p.RenewBefore)):
		return fmt.Sprintf("it expires at %s, within %s", leaf.NotAfter.Format(time.RFC3339), p.RenewBefore)
	}
	if err := b.Verify(now); err != nil {
		return fmt.Sprintf("it does not verify against %s: %v", KeyCABundle, err)
	}
	return ""
}

// Issue carries out pl on b and returns the Secret data to write.
func (p *Policy) Issue(now time.Time, b *Bundle, pl Plan) (map[string][]byte, error) {
	data := map[string][]byte{}
	// CAs that expired are useless in a bundle; drop them on every write.
	var cas []*x509.Certificate
	for _, c := range b.CAs {
		if c.IsCA && now.Before(c.NotAfter) {
			cas = append(cas, c)
		}
	}
	var signer *keyPair
	if pl.NewCA {
		ca, err := newCA(now, p.CAValidity)
		if err != nil {
			return nil, err
		}
		signer = ca
		cas = append([]*x509.Certificate{ca.cert}, cas...)
		data[KeyCAKey] = ca.keyPEM
	} else {
		signer = &keyPair{cert: b.CAs[0], key: b.CAKey}
		data[KeyCAKey] = b.raw[KeyCAKey]
	}
	if pl.DropOldCAs {
		cas = cas[:1]
	}
	if pl.NewServing {
		leaf, err := newServing(signer, now, p.Validity, p.DNSNames, p.IPAddresses)
		if err != nil {
			return nil, err
		}
		data[KeyServingCert], data[KeyServingKey] = leaf.certPEM, leaf.keyPEM
	} else {
		data[KeyServingCert], data[KeyServingKey] = b.raw[KeyServingCert], b.raw[KeyServingKey]
	}
	data[KeyCABundle] = encodeCerts(cas)
	return data, nil
}

// issuedAt recovers when Portal issued c (NotBefore is backdated). The CA
// rotation steps count from it, which keeps their state in the certificates
// themselves: any replica that becomes leader resumes a rotation where the
// last one left it.
func issuedAt(c *x509.Certificate) time.Time { return c.NotBefore.Add(backdate) }

// earliest is the earliest non-zero time of ts.
func earliest(ts ...time.Time) time.Time {
	var first time.Time
	for _, t := range ts {
		if !t.IsZero() && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return first
}
