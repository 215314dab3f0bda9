package pki

import (
	"bytes"
	"testing"
	"time"
)

// seeds adds a valid Secret, valid parts under the wrong keys, and junk.
func seeds(f *testing.F) {
	good, err := testPolicy().Issue(epoch, Read(nil), Plan{NewCA: true, NewServing: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good[KeyServingCert], good[KeyServingKey], good[KeyCABundle], good[KeyCAKey])
	f.Add(good[KeyServingCert], good[KeyCAKey], good[KeyServingCert], good[KeyServingKey])
	f.Add(good[KeyCABundle], good[KeyCAKey], good[KeyServingCert], []byte{})
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n\n-----END CERTIFICATE-----\n"), []byte("-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----\n"), []byte("junk"), []byte{0})
	f.Add(bytes.Repeat([]byte("-----BEGIN "), 64), []byte{}, []byte{}, []byte{})
}

func secretData(crt, key, ca, caKey []byte) map[string][]byte {
	return map[string][]byte{KeyServingCert: crt, KeyServingKey: key, KeyCABundle: ca, KeyCAKey: caKey}
}

// FuzzParse feeds arbitrary bytes to every key of the Secret: parsing never
// panics, and what it accepts can be served and trusted.
func FuzzParse(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, crt, key, ca, caKey []byte) {
		data := secretData(crt, key, ca, caKey)
		if b, err := Parse(data); err == nil {
			if b.Serving == nil || b.Serving.Leaf == nil || b.Serving.PrivateKey == nil {
				t.Fatal("Parse accepted a Secret with nothing to serve")
			}
			if len(ca) > 0 {
				if again, err := parseCerts(b.CABundle()); err != nil || len(again) != len(b.CAs) {
					t.Fatalf("CABundle does not round-trip: %v", err)
				}
			}
		}
		r := Read(data)
		if r.CAKey != nil && (len(r.CAs) == 0 || !publicKeyMatches(r.CAs[0], r.CAKey)) {
			t.Fatal("ca.key accepted without matching the first CA")
		}
	})
}

// FuzzRepair checks that the self source repairs any Secret in one write:
// whatever the input, what Issue writes parses and needs no further new
// certificate. It signs and generates keys, so it runs slower than FuzzParse.
func FuzzRepair(f *testing.F) {
	seeds(f)
	p := testPolicy()
	now := epoch.Add(time.Hour)
	f.Fuzz(func(t *testing.T, crt, key, ca, caKey []byte) {
		r := Read(secretData(crt, key, ca, caKey))
		pl := p.Decide(now, r)
		if !pl.Changes() {
			return
		}
		out, err := p.Issue(now, r, pl)
		if err != nil {
			t.Fatalf("issue: %v", err)
		}
		if _, err := Parse(out); err != nil {
			t.Fatalf("the repaired Secret does not parse: %v", err)
		}
		if next := p.Decide(now, Read(out)); next.NewCA || next.NewServing {
			t.Fatalf("the repaired Secret still needs %v", next.Why)
		}
	})
}
