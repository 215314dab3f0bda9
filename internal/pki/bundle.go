package pki

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"
)

// Keys of the certificate Secret. tls.crt, tls.key and ca.crt are the keys of a
// kubernetes.io/tls Secret as cert-manager writes it, so either source can
// fill the same Secret.
const (
	// KeyServingCert holds the serving certificate, then any intermediates.
	KeyServingCert = "tls.crt"
	// KeyServingKey holds the serving certificate's private key.
	KeyServingKey = "tls.key"
	// KeyCABundle holds the CAs clients should trust, newest first. During a
	// CA rotation it holds the new CA and the one it replaces.
	KeyCABundle = "ca.crt"
	// KeyCAKey holds the private key of the first CA in ca.crt. Only the
	// self source writes it: it lets any replica, or Portal after a restart,
	// keep signing with the same CA instead of breaking every caBundle.
	KeyCAKey = "ca.key"
)

// Bundle is the parsed content of a certificate Secret. Each part is nil when
// the Secret lacks it or it does not parse; the reason is kept for logs.
type Bundle struct {
	// Serving is the serving certificate with its chain and key; Leaf is set.
	Serving *tls.Certificate
	// CAs are the certificates of ca.crt in order, newest first.
	CAs []*x509.Certificate
	// CAKey is the key of CAs[0], from ca.key.
	CAKey crypto.Signer

	servingErr, caErr, caKeyErr error
	raw                         map[string][]byte
}

// Parse reads a certificate Secret's data. It fails when tls.crt or tls.key is
// missing, unreadable or mismatched, or when ca.crt is present but unreadable:
// the cases in which the Secret cannot be served or trusted. A missing or bad
// ca.key is no error here (cert-manager never writes one); CAKey is nil then.
func Parse(data map[string][]byte) (*Bundle, error) {
	b := Read(data)
	if err := errors.Join(b.servingErr, b.caErr); err != nil {
		return nil, err
	}
	return b, nil
}

// Read parses every part of data it can. It never fails: the issuer reuses
// whatever is still good (a readable CA, say) when it repairs a Secret.
func Read(data map[string][]byte) *Bundle {
	b := &Bundle{raw: data}
	crt, key := data[KeyServingCert], data[KeyServingKey]
	switch {
	case len(crt) == 0:
		b.servingErr = fmt.Errorf("%s is missing or empty", KeyServingCert)
	case len(key) == 0:
		b.servingErr = fmt.Errorf("%s is missing or empty", KeyServingKey)
	default:
		pair, err := tls.X509KeyPair(crt, key)
		if err == nil && pair.Leaf == nil {
			// GODEBUG=x509keypairleaf=0 leaves Leaf unset; everything here reads it.
			pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0])
		}
		if err != nil {
			b.servingErr = fmt.Errorf("%s/%s: %w", KeyServingCert, KeyServingKey, err)
		} else {
			b.Serving = &pair
		}
	}
	if pemCAs := data[KeyCABundle]; len(pemCAs) > 0 {
		cas, err := parseCerts(pemCAs)
		if err != nil {
			b.caErr = fmt.Errorf("%s: %w", KeyCABundle, err)
		} else {
			b.CAs = cas
		}
	}
	if pemKey := data[KeyCAKey]; len(pemKey) > 0 {
		k, err := parseKey(pemKey)
		switch {
		case err != nil:
			b.caKeyErr = fmt.Errorf("%s: %w", KeyCAKey, err)
		case len(b.CAs) == 0:
			b.caKeyErr = fmt.Errorf("%s has no certificate in %s", KeyCAKey, KeyCABundle)
		case !publicKeyMatches(b.CAs[0], k):
			b.caKeyErr = fmt.Errorf("%s does not match the first certificate of %s", KeyCAKey, KeyCABundle)
		default:
			b.CAKey = k
		}
	}
	return b
}

// CABundle is ca.crt re-encoded: PEM certificates only, newest first.
func (b *Bundle) CABundle() []byte { return encodeCerts(b.CAs) }

// Verify checks that the serving certificate chains to one of the CAs at now
// for server authentication, which is what an API server checks.
func (b *Bundle) Verify(now time.Time) error {
	if b.Serving == nil || len(b.CAs) == 0 {
		return errors.New("no serving certificate or no CA")
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	for _, c := range b.CAs {
		// Go trusts any certificate in the root pool, a leaf included; only
		// CAs count here, as only CAs survive into a rewritten ca.crt.
		if c.IsCA {
			roots.AddCert(c)
		}
	}
	for _, der := range b.Serving.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	_, err := b.Serving.Leaf.Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return err
}

// sansMatch reports whether the leaf names exactly dnsNames and ips, so a
// changed Service name or a new IP gets a new certificate.
func sansMatch(leaf *x509.Certificate, dnsNames []string, ips []net.IP) bool {
	want, got := slices.Clone(dnsNames), slices.Clone(leaf.DNSNames)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) || len(ips) != len(leaf.IPAddresses) {
		return false
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// SameData reports whether two Secret data maps hold the same bytes for the
// keys Portal writes.
func SameData(a, b map[string][]byte) bool {
	for _, k := range []string{KeyServingCert, KeyServingKey, KeyCABundle, KeyCAKey} {
		if !bytes.Equal(a[k], b[k]) {
			return false
		}
	}
	return true
}
