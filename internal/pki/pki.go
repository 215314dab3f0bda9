// Package pki holds the certificate logic of Portal's webhook certificate
// controller, free of Kubernetes: generating and parsing keys and
// certificates, reading the Secret's keys into a Bundle, and the Policy that
// decides when to issue what. Keeping it apart keeps its fuzz target small
// and fast.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// backdate moves NotBefore into the past so an API server whose clock runs a
// little behind ours still accepts a certificate the moment it is issued. The
// planner adds it back to recover the issuance time (see issuedAt).
const backdate = 5 * time.Minute

// keyPair is a certificate with its private key, both parsed and PEM-encoded.
type keyPair struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// newCA creates a self-signed ECDSA P-256 CA valid from now for validity.
func newCA(now time.Time, validity time.Duration) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// The serial in the name keeps successive CAs distinguishable in
		// `openssl x509 -text` output during an overlap.
		Subject:               pkix.Name{Organization: []string{"Portal"}, CommonName: "portal-webhook-ca-" + serial.Text(16)[:8]},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// No intermediate is ever issued, so forbid one.
		// x509.CreateCertificate fills SubjectKeyId for a CA and copies it into
		// the AuthorityKeyId of what the CA signs, so clients pick the right
		// CA from a bundle that holds two.
		MaxPathLenZero: true,
	}
	return sign(tmpl, tmpl, key.Public(), key, key)
}

// newServing creates a serving certificate for dnsNames and ips signed by ca.
// It never outlives ca: a certificate the CA cannot vouch for is useless.
func newServing(ca *keyPair, now time.Time, validity time.Duration, dnsNames []string, ips []net.IP) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(validity)
	if ca.cert.NotAfter.Before(notAfter) {
		notAfter = ca.cert.NotAfter
	}
	return sign(servingTemplate(serial, now.Add(-backdate), notAfter, dnsNames, ips), ca.cert, key.Public(), ca.key, key)
}

func servingTemplate(serial *big.Int, notBefore, notAfter time.Time, dnsNames []string, ips []net.IP) *x509.Certificate {
	cn := "portal-webhook"
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"Portal"}, CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer, key crypto.Signer) (*keyPair, error) {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, fmt.Errorf("sign certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse issued certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return &keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	// Keep the hex text at least 8 digits long for the CA name above.
	return serial.SetBit(serial, 126, 1), nil
}

// parseCerts decodes every CERTIFICATE block of data. Other block types are an
// error, as is data with no certificate: a bundle silently missing a CA is how
// webhooks break.
func parseCerts(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is %q, want CERTIFICATE", len(certs)+1, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	return certs, nil
}

// parseKey decodes the first PEM block of data as a PKCS#8, SEC 1 (EC) or
// PKCS#1 (RSA) private key: the encodings Portal and cert-manager write.
func parseKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM private key found")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block is %q, want a private key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("private key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key of type %T cannot sign", key)
	}
	return signer, nil
}

// publicKeyMatches reports whether key is the private half of cert's key.
func publicKeyMatches(cert *x509.Certificate, key crypto.Signer) bool {
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(cert.PublicKey)
}

// encodeCerts PEM-encodes certs in order.
func encodeCerts(certs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}
