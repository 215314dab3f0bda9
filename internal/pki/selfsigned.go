package pki

import (
	"net"
	"time"
)

// NewSelfSigned issues a new CA and a serving certificate for dnsNames and
// ips signed by it, valid from now for validity: for tests and local tools
// that need a TLS server whose clients verify it against CABundle(). Portal
// itself issues through the certs controller and Policy.
func NewSelfSigned(now time.Time, validity time.Duration, dnsNames []string, ips []net.IP) (*Bundle, error) {
	p := Policy{
		DNSNames: dnsNames, IPAddresses: ips,
		Validity: validity, CAValidity: 2 * validity,
		RenewBefore: validity / 4, CARenewBefore: validity / 2, Overlap: validity / 8,
	}
	empty := &Bundle{}
	data, err := p.Issue(now, empty, p.Decide(now, empty))
	if err != nil {
		return nil, err
	}
	return Parse(data)
}
