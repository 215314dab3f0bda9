package proxy

import (
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/vilaca/portal/internal/waf/cache"
)

// benchTable is a Gateway of 32 tenants, each with its own hostname and a
// route of exact, prefix and regex path matches and a header match.
func benchTable() *cache.Table {
	tbl := &cache.Table{Gateway: "gw/shared", Default: -1}
	for i := range 32 {
		h := fmt.Sprintf("t%d.example.com", i)
		r := fmt.Sprintf("HTTPRoute/t%d/web", i)
		tbl.Rows = append(tbl.Rows,
			row(r, h, exact("/healthz"), -1),
			row(r, h, prefix("/static"), -1),
			cache.TableRow{Route: r, Hostnames: []string{h}, Path: &cache.StringMatch{Type: "PathPrefix", Value: "/api"},
				Headers: []cache.StringMatch{{Type: "Exact", Name: "X-Version", Value: "2"}}, Policy: -1},
			row(r, h, cache.StringMatch{Type: "RegularExpression", Value: `/api/v[0-9]+/users/[^/]+/orders`}, -1),
			row(r, h, prefix("/"), -1),
		)
	}
	return tbl
}

// BenchmarkRouterPick measures matching a benign request against that
// table: the router's own cost, which BenchmarkProxyCRS does not include.
func BenchmarkRouterPick(b *testing.B) {
	st, err := compileTable(benchTable())
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, host, path string }{
		{"exact", "t31.example.com", "/healthz"},
		{"regex", "t31.example.com", "/api/v1/users/42/orders"},
		{"fallthrough", "t31.example.com", "/index.html"},
	} {
		req := httptest.NewRequest("GET", "http://"+c.host+c.path, nil)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				_, _, _ = st.pick(req, c.path)
			}
		})
	}
}
