package bundle_test

import (
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

func TestParseLocation(t *testing.T) {
	for _, s := range []string{"s3://bundles/a.json", "s3://bucket_name/folder1/folder2/bundle.tgz", "s3://a.b-c/x/y/z", "s3://abc/k", "s3://" + strings.Repeat("b", 63) + "/k"} {
		loc, err := bundle.ParseLocation(s)
		if err != nil || loc.String() != s {
			t.Errorf("%q: %v %q", s, err, loc)
		}
	}
	for s, want := range map[string]string{
		"https://bundles/a.json":                    "must start with s3://",
		"s3://bundles":                              "no object key",
		"s3://bundles/":                             "no object key",
		"s3://Bundles/a":                            "not a valid bucket name",
		"s3://ab/a":                                 "not a valid bucket name",
		"s3://" + strings.Repeat("b", 64) + "/k":    "not a valid bucket name",
		"s3://a-/k":                                 "not a valid bucket name",
		"s3://a..b/k":                               "not a valid bucket name",
		"s3://bundles/a/../b":                       `".."`,
		"s3://bundles/a//b":                         "empty",
		"s3://bundles/./b":                          `"."`,
		"s3://bundles/a?versionId":                  "'?'",
		"s3://bundles/a\x00b":                       `'\x00'`,
		"s3://bundles/" + strings.Repeat("k", 1025): "more than 1024",
	} {
		_, err := bundle.ParseLocation(s)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one saying %s", s, err, want)
		}
	}
	if bundle.ValidSHA256(strings.Repeat("A", 64)) || !bundle.ValidSHA256(strings.Repeat("a", 64)) {
		t.Error("sha256 must be 64 lowercase hex digits")
	}
}

// A data file name is a RuleData key: 1 to 253 of letters, digits, '-', '_'
// and '.'.
func TestDecodeDataFileNames(t *testing.T) {
	for name, ok := range map[string]bool{
		"a.txt": true, strings.Repeat("n", 253): true,
		strings.Repeat("n", 254): false, "": false, "a/b": false, "é.txt": false,
	} {
		data, err := bundle.Encode(ruleset.Bundle{Rules: "SecRuleEngine On\n", DataFiles: map[string][]byte{name: []byte("x")}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = bundle.Decode(data)
		if ok && err != nil {
			t.Errorf("%q: %v", name, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "at most 253")) {
			t.Errorf("%q: error %v, want the name refused", name, err)
		}
	}
}
