package cache

import (
	"net/http"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzParsePath: the path parser never panics, and what it accepts is a
// valid namespace and a name that is either a Kubernetes object name or a
// bundle's name, never both, and renders back to the same path.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{
		"/rules/ns/name", "/rules/ns/name/latest", "/rules/", "/rules//", "/rules/ns/name/latest/x",
		"/rules/NS/x", "/rules/a/b.c-d", "/rules/a/..", "/x", "",
		"/rules/ns/bundle:0123456789abcdef0123", "/rules/ns/bundle-0123456789abcdef0123/latest", "/rules/ns/bundle:0123",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		ns, name, latest, err := ParsePath(p)
		if err != nil {
			return
		}
		objectName := len(validation.IsDNS1123Subdomain(name)) == 0
		if len(validation.IsDNS1123Label(ns)) > 0 || objectName == isBundleName(name) {
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

// FuzzBearerToken: the Authorization header parser never panics and what
// it accepts is a non-empty token without surrounding space, within the
// size bound.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer abc", "Bearer ", "Basic abc", "Bearer  a b ", "", "Bearer"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		r := &http.Request{Header: http.Header{"Authorization": {header}}}
		token, ok := bearerToken(r)
		if !ok {
			return
		}
		if token == "" || token != strings.TrimSpace(token) || len(token) > maxTokenBytes {
			t.Fatalf("%q accepted as %q", header, token)
		}
	})
}

// FuzzServiceAccount: the user name parser never panics and accepts only
// names it can render back.
func FuzzServiceAccount(f *testing.F) {
	for _, s := range []string{"system:serviceaccount:ns:name", "system:serviceaccount:ns", "alice", "system:serviceaccount:a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, user string) {
		ns, name, ok := ServiceAccount(user)
		if ok && "system:serviceaccount:"+ns+":"+name != user {
			t.Fatalf("%q parsed to %q %q", user, ns, name)
		}
	})
}
