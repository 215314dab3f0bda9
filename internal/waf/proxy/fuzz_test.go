package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vilaca/portal/internal/waf/cache"
)

// FuzzParseRuleSet: --ruleset parsing never panics, and what it accepts is
// a DNS-label namespace and a DNS-subdomain name that join back to the
// input.
func FuzzParseRuleSet(f *testing.F) {
	for _, s := range []string{"ns/name", "a/b.c-d", "", "/", "ns/", "/x", "ns/a/b", "NS/x", "a.b/c", "ns/name\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ns, name, err := ParseRuleSet(s)
		if err != nil {
			return
		}
		if len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			t.Fatalf("%q accepted as %q/%q", s, ns, name)
		}
		if ns+"/"+name != s {
			t.Fatalf("%q parsed to %q/%q", s, ns, name)
		}
	})
}

// FuzzPollResponses: whatever the cache answers (status, /latest body,
// entry body), a poll never panics, and the proxy only ever enforces a
// revision it compiled, under the uuid the entry named.
func FuzzPollResponses(f *testing.F) {
	entry := `{"uuid":"u2","timestamp":"2026-01-02T03:04:05Z","rules":"SecRuleEngine On\n"}`
	f.Add(200, `{"uuid":"u2","timestamp":"2026-01-02T03:04:05Z"}`, entry)
	f.Add(200, `{"uuid":"u2"}`, `{"uuid":"u2","rules":"SecRule ARGS \"@rx (\" \"id:1\""}`)
	f.Add(200, `{"uuid":"u3"}`, `{"uuid":"u3","rules":"Include /etc/passwd"}`)
	f.Add(200, `{"uuid":"u4"}`, `{"uuid":"u4","rules":"","dataFiles":{"a.txt":"!!"}}`)
	f.Add(200, `not json`, entry)
	f.Add(404, `{}`, `{}`)
	f.Add(500, `oops`, `oops`)
	f.Add(200, `{"uuid":1}`, `[]`)

	var status atomic.Int64
	var latest, body atomic.Pointer[string]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
		if strings.HasSuffix(r.URL.Path, "/latest") {
			_, _ = w.Write([]byte(*latest.Load()))
			return
		}
		_, _ = w.Write([]byte(*body.Load()))
	}))
	f.Cleanup(srv.Close)
	client, err := cache.NewClient(srv.URL, srv.Client())
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, code int, latestBody, entryBody string) {
		if code < 200 || code > 599 {
			code = 200
		}
		status.Store(int64(code))
		latest.Store(&latestBody)
		body.Store(&entryBody)
		target := &Proxy{Upstream: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, Logger: discard()}
		defer target.Close()
		p := &Poller{Client: client, Namespace: "ns", Name: "x", Interval: MinPollInterval, Target: target, Logger: discard()}
		changed, err := p.Poll(t.Context())
		rev, ok := target.Current()
		switch {
		case changed && (err != nil || !ok || rev.UUID == ""):
			t.Fatalf("changed with error %v, revision %+v", err, rev)
		case !changed && ok:
			t.Fatalf("a revision is in force after a failed poll: %+v (%v)", rev, err)
		}
	})
}
