package manager

import (
	"net"
	"testing"
)

// TestCacheCertificateNamesTheListenAddress: a data plane that dials the
// cache by the address it listens on (portal dev --node's local waf-proxy
// hint) verifies a certificate that names it; the loopback is always there
// and the unspecified address is no name.
func TestCacheCertificateNamesTheListenAddress(t *testing.T) {
	for addr, want := range map[string]string{
		"10.244.0.1:18080": "10.244.0.1",
		"[fd00::1]:18080":  "fd00::1",
		"127.0.0.1:18080":  "",
		":18080":           "",
		"0.0.0.0:18080":    "",
		"cache.local:1":    "",
		"garbage":          "",
	} {
		got := listenIPs(addr)
		switch {
		case want == "" && len(got) != 0:
			t.Errorf("listenIPs(%q) = %v, want none", addr, got)
		case want != "" && (len(got) != 1 || !got[0].Equal(net.ParseIP(want))):
			t.Errorf("listenIPs(%q) = %v, want %s", addr, got, want)
		}
	}
}
