package bundle_test

import (
	"testing"

	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// FuzzParseLocation: any string either fails with an error or parses to a
// location that prints back to itself and parses again to the same thing.
func FuzzParseLocation(f *testing.F) {
	for _, s := range []string{"s3://bundles/a/b.json", "s3://bucket_name/folder1/folder2/bundle.tgz", "s3://b/k", "s3://bucket/", "s3://bucket/a/../b",
		"s3://Bucket/k", "http://x/y", "s3://bucket/a?b", "s3://bucket//k", "s3://a..b/k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		loc, err := bundle.ParseLocation(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if loc.String() != s {
			t.Fatalf("%q printed as %q", s, loc.String())
		}
		again, err := bundle.ParseLocation(loc.String())
		if err != nil || again != loc {
			t.Fatalf("%q did not parse again: %v", s, err)
		}
	})
}

// FuzzDecode: any bytes decode to a bundle or fail with an error, and a
// decoded bundle encodes and decodes to the same content.
func FuzzDecode(f *testing.F) {
	good, _ := bundle.Encode(ruleset.Bundle{Rules: "SecRuleEngine On\n", DataFiles: map[string][]byte{"a.txt": []byte("x")}})
	f.Add(good)
	f.Add([]byte(`{"format":"waf.portal.io/bundle/v1","rules":"x"}`))
	f.Add([]byte(`{"format":"waf.portal.io/bundle/v1","rules":"x","dataFiles":{"../etc":"eA=="}}`))
	f.Add([]byte(`{"format":"other","rules":"x"}`))
	f.Add([]byte(`{"format":"waf.portal.io/bundle/v1","rules":"x"} {}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := bundle.Decode(data)
		if err != nil {
			return
		}
		if b.Rules == "" {
			t.Fatal("decoded a bundle without rules")
		}
		enc, err := bundle.Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		b2, err := bundle.Decode(enc)
		if err != nil || b2.SHA256() != b.SHA256() {
			t.Fatalf("round trip changed the bundle: %v", err)
		}
	})
}
