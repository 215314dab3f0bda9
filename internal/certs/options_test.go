package certs

import (
	"net"
	"testing"
	"time"
)

var (
	testDNS = ServiceDNSNames("portal-webhook", "portal-system")
	testIPs = []net.IP{net.ParseIP("127.0.0.1")}
	epoch   = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
)

func TestDefaultsRejectRenewalLoops(t *testing.T) {
	base := Options{Namespace: "ns", DNSNames: testDNS}
	bad := []func(*Options){
		func(o *Options) { o.Namespace = "" },
		func(o *Options) { o.DNSNames = nil },
		func(o *Options) { o.Source = "vault" },
		func(o *Options) { o.RenewBefore = 100 * 24 * time.Hour },
		func(o *Options) { o.CARenewBefore = 10 * 24 * time.Hour },
		func(o *Options) { o.CAOverlap = 20 * 24 * time.Hour },
	}
	for i, mutate := range bad {
		o := base
		mutate(&o)
		if _, err := New(o); err == nil {
			t.Errorf("case %d: New accepted %+v", i, o)
		}
	}
	o := base
	o.Source, o.DNSNames = SourceCertManager, nil
	if _, err := New(o); err != nil {
		t.Errorf("cert-manager source without names: %v", err)
	}
}
