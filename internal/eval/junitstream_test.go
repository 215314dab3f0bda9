package eval

import (
	"bytes"
	"encoding/xml"
	"testing"
)

// FuzzJUnitCase holds appendJUnitCase to the bytes encoding/xml writes for
// the same test case at the report's indent, for every outcome and any
// strings; where it leaves a case to encoding/xml, it must leave the
// buffer as it was.
func FuzzJUnitCase(f *testing.F) {
	for _, s := range []string{"", "plain", `container "c0" & <b> 'q'`, "tab\there\nnl\rcr", "é", "\xff", "\x00", "a\x0bb", "\x1f", "\x7f", "\u2028", "\ufffd", "]]>", "a&b\xff", "<é>"} {
		f.Add(s, s+"x", uint8(0))
		f.Add("x"+s, s, uint8(1))
		f.Add(s, "y", uint8(2))
		f.Add("z", s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, a, b string, outcome uint8) {
		// The suites' names (the rules') are escaped as xml.EscapeText does.
		for _, s := range []string{a, b} {
			var want bytes.Buffer
			_ = xml.EscapeText(&want, []byte(s))
			if got := appendXMLAttr([]byte("name="), s); string(got) != "name="+want.String() {
				t.Fatalf("appendXMLAttr(%q) = %q, want %q", s, got, "name="+want.String())
			}
		}
		for _, res := range []Result{
			{Resource: Resource{Kind: a, Namespace: b, Name: a}, Rule: b, Severity: a, EnforcementAction: b, Container: a, Message: b},
			{Resource: Resource{Kind: "Pod", Name: b}, Rule: a, Severity: "high", EnforcementAction: "deny", Message: a},
		} {
			res.Result = []string{"pass", "fail", "error", "skip"}[outcome%4]
			var want bytes.Buffer
			enc := xml.NewEncoder(&want)
			enc.Indent("    ", "  ")
			if err := enc.EncodeElement(junitCaseOf(&res), xml.StartElement{Name: xml.Name{Local: "testcase"}}); err != nil {
				t.Fatal(err)
			}
			got, ok := appendJUnitCase([]byte("before"), &res)
			if !ok {
				if string(got) != "before" {
					t.Fatalf("%+v: left to encoding/xml, but the buffer became %q", res, got)
				}
				continue
			}
			if w := "before\n" + string(bytes.TrimLeft(want.Bytes(), "\n")); string(got) != w {
				t.Fatalf("%+v:\n got %q\nwant %q", res, got, w)
			}
		}
	})
}
