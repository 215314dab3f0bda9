package devcluster

import (
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// testServices is a lookup over two Services: web/hello with a ClusterIP
// and web/headless without one.
func testServices(ns, name string) ([]netip.Addr, bool) {
	switch ns + "/" + name {
	case "web/hello":
		return []netip.Addr{netip.MustParseAddr("10.96.0.20")}, true
	case "web/headless":
		return nil, true
	}
	return nil, false
}

func query(t testing.TB, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b, err := (&dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 42, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}},
	}).Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDNSAnswer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		want  []string
	}{
		{"hello.web.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"10.96.0.20"}},
		{"HELLO.Web.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"10.96.0.20"}},
		// A resolver asks AAAA next to A: the name exists, without records.
		{"hello.web.svc.cluster.local.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, nil},
		{"headless.web.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, nil},
		// The search path's wrong guesses, other namespaces, other names.
		{"hello.web.svc.web.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		{"hello.other.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		{"web.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		{"x.hello.web.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		// Nothing is forwarded: names outside the cluster do not exist.
		{"example.com.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
	} {
		t.Run(tc.name+"/"+tc.typ.String(), func(t *testing.T) {
			resp, ok := dnsAnswer(query(t, tc.name, tc.typ), testServices)
			if !ok {
				t.Fatal("no answer")
			}
			var m dnsmessage.Message
			if err := m.Unpack(resp); err != nil {
				t.Fatal(err)
			}
			if m.ID != 42 || !m.Response || m.RCode != tc.rcode {
				t.Fatalf("header %+v, want ID 42, a response, rcode %v", m.Header, tc.rcode)
			}
			var got []string
			for _, a := range m.Answers {
				got = append(got, netip.AddrFrom4(a.Body.(*dnsmessage.AResource).A).String())
			}
			if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
				t.Fatalf("answers %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDNSAnswerRefusesWhatIsNoQuery(t *testing.T) {
	if _, ok := dnsAnswer([]byte{1, 2, 3}, testServices); ok {
		t.Error("a 3-byte packet was answered")
	}
	resp, _ := dnsAnswer(query(t, "hello.web.svc.cluster.local.", dnsmessage.TypeA), testServices)
	if _, ok := dnsAnswer(resp, testServices); ok {
		t.Error("a response was answered (a reflection loop between two servers)")
	}
	b, err := (&dnsmessage.Message{Header: dnsmessage.Header{ID: 7}}).Pack()
	if err != nil {
		t.Fatal(err)
	}
	resp, ok := dnsAnswer(b, testServices)
	var m dnsmessage.Message
	if !ok || m.Unpack(resp) != nil || m.RCode != dnsmessage.RCodeFormatError {
		t.Errorf("a query without a question: answered %v, rcode %v, want FORMERR", ok, m.RCode)
	}
}

// FuzzDNSAnswer: any datagram a pod sends gets no answer or one that
// parses, for the ID it came with, and never panics.
func FuzzDNSAnswer(f *testing.F) {
	f.Add(query(f, "hello.web.svc.cluster.local.", dnsmessage.TypeA))
	f.Add(query(f, "example.com.", dnsmessage.TypeAAAA))
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, ok := dnsAnswer(b, testServices)
		if !ok {
			return
		}
		var m dnsmessage.Message
		if err := m.Unpack(resp); err != nil {
			t.Fatalf("the answer does not parse: %v", err)
		}
		if !m.Response || m.ID != uint16(b[0])<<8|uint16(b[1]) {
			t.Fatalf("answer header %+v for a query with ID bytes %x", m.Header, b[:2])
		}
		if len(resp) > 512 {
			t.Fatalf("a %d-byte answer: more than plain UDP carries", len(resp))
		}
	})
}
