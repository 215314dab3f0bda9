package cache

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzParsePath: the path parser never panics, and what it accepts is a
// valid namespace and name that render back to the same path.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{
		"/rules/ns/name", "/rules/ns/name/latest", "/rules/", "/rules//", "/rules/ns/name/latest/x",
		"/rules/NS/x", "/rules/a/b.c-d", "/rules/a/..", "/x", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		ns, name, latest, err := ParsePath(p)
		if err != nil {
			return
		}
		if len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			t.Fatalf("%q accepted as %q/%q", p, ns, name)
		}
		back := "/rules/" + ns + "/" + name
		if latest {
			back += "/latest"
		}
		if back != p {
			t.Fatalf("%q parsed to %q", p, back)
		}
	})
}
