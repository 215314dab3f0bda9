package devcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/net/dns/dnsmessage"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
)

// The node's cluster DNS: the kubelet gives every pod (dnsPolicy
// ClusterFirst) NodeIP as its name server, and this server answers from
// the Services the API server holds. It is authoritative for
// <service>.<namespace>.svc.cluster.local only and forwards nothing: every
// other name is NXDOMAIN, so no query a pod makes leaves the machine.

// dnsTTL is short: a test deletes and recreates Services.
const dnsTTL = 5

// dnsMaxPacket is the largest query read; a longer datagram is cut and
// then fails to parse.
const dnsMaxPacket = 1232

// serviceLookup returns the IPv4 ClusterIPs of Service name in namespace
// ns (none for a headless Service) and whether the Service exists.
type serviceLookup func(ns, name string) (ips []netip.Addr, found bool)

// dnsServer answers DNS queries over UDP on NodeIP:53.
type dnsServer struct {
	conn   net.PacketConn
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// startDNS watches Services through cfg and serves their names on
// addr (host:port) until stop.
func startDNS(ctx context.Context, cfg *rest.Config, addr string) (*dnsServer, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return nil, fmt.Errorf("devcluster: cluster DNS on %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &dnsServer{conn: conn, cancel: cancel}
	factory := informers.NewSharedInformerFactory(cs, 0)
	lister := factory.Core().V1().Services().Lister()
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			cancel()
			conn.Close()
			factory.Shutdown()
			return nil, fmt.Errorf("devcluster: cluster DNS: the %v informer did not sync", typ)
		}
	}
	lookup := listerLookup(lister)
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		defer factory.Shutdown()
		s.serve(lookup)
	}()
	return s, nil
}

func listerLookup(lister listersv1.ServiceLister) serviceLookup {
	return func(ns, name string) ([]netip.Addr, bool) {
		svc, err := lister.Services(ns).Get(name)
		if err != nil {
			return nil, false
		}
		return serviceIPv4(svc), true
	}
}

// serviceIPv4 are a Service's IPv4 ClusterIPs: none for a headless or
// ExternalName Service.
func serviceIPv4(svc *corev1.Service) []netip.Addr {
	var ips []netip.Addr
	for _, s := range svc.Spec.ClusterIPs {
		if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
			ips = append(ips, a)
		}
	}
	return ips
}

func (s *dnsServer) serve(lookup serviceLookup) {
	buf := make([]byte, dnsMaxPacket)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		resp, ok := dnsAnswer(buf[:n], lookup)
		if !ok {
			continue
		}
		_, _ = s.conn.WriteTo(resp, from)
	}
}

// stop closes the socket and waits for the server and its informer.
func (s *dnsServer) stop() {
	s.cancel()
	s.conn.Close()
	s.done.Wait()
}

// dnsAnswer builds the response to one query packet; ok is false when the
// packet is not a query whose header parses (it gets no answer).
func dnsAnswer(query []byte, lookup serviceLookup) (resp []byte, ok bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil, false
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired}
	questions, err := p.AllQuestions()
	switch {
	case h.OpCode != 0:
		rh.RCode = dnsmessage.RCodeNotImplemented
	case err != nil || len(questions) != 1:
		rh.RCode = dnsmessage.RCodeFormatError
	}
	if rh.RCode != dnsmessage.RCodeSuccess {
		b, err := (&dnsmessage.Message{Header: rh}).Pack()
		return b, err == nil
	}
	q := questions[0]
	msg := dnsmessage.Message{Header: rh, Questions: questions}
	ips, found := resolveName(q.Name.String(), lookup)
	switch {
	case !found:
		msg.Header.RCode = dnsmessage.RCodeNameError
	case q.Class != dnsmessage.ClassINET && q.Class != dnsmessage.ClassANY:
		// The name exists, with no record of this class.
	case q.Type == dnsmessage.TypeA || q.Type == dnsmessage.TypeALL:
		msg.Header.Authoritative = true
		for _, ip := range ips {
			msg.Answers = append(msg.Answers, dnsmessage.Resource{
				Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: dnsTTL},
				Body:   &dnsmessage.AResource{A: ip.As4()},
			})
		}
	default:
		// AAAA and the rest: the name exists (NOERROR), without records, so
		// a resolver asking A and AAAA at once keeps the A answer.
		msg.Header.Authoritative = true
	}
	b, err := msg.Pack()
	return b, err == nil
}

// resolveName maps <service>.<namespace>.svc.cluster.local (any case,
// with or without the final dot) to the Service's addresses; found is false
// for every other name, which the server answers NXDOMAIN.
func resolveName(name string, lookup serviceLookup) (ips []netip.Addr, found bool) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	rest, ok := strings.CutSuffix(name, ".svc."+clusterDomain)
	if !ok {
		return nil, false
	}
	svc, ns, ok := strings.Cut(rest, ".")
	if !ok || svc == "" || ns == "" || strings.Contains(ns, ".") {
		return nil, false
	}
	return lookup(ns, svc)
}
