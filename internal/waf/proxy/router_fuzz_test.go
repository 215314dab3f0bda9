package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/waf/cache"
)

// FuzzRouteTable: whatever table a cache serves, compiling it and matching
// requests against it never panics, a compiled table only points at
// policies it has, and a request costs at most cache.MaxHostRegexInsts
// regex steps per byte of its longest input.
func FuzzRouteTable(f *testing.F) {
	f.Add(`{"gateway":"a/b","default":0,"policies":[{"policy":"a/p"}],"rows":[{"route":"HTTPRoute/a/r","hostnames":["*.example.com"],"path":{"type":"PathPrefix","value":"/x"},"headers":[{"type":"RegularExpression","name":"X","value":"a+"}],"query":[{"type":"Exact","name":"q","value":"1"}],"policy":0}]}`, "/x/y?q=1", "www.example.com")
	f.Add(`{"default":-1,"rows":[{"path":{"type":"RegularExpression","value":"(("}}]}`, "/", "")
	f.Add(`{"default":5}`, "/", "h")
	f.Add(`{"default":0,"policies":[{"policy":"a/p"}]}`, "/x/\xdc\x01q=1", "h")
	f.Fuzz(func(t *testing.T, raw, target, host string) {
		var tbl cache.Table
		if json.Unmarshal([]byte(raw), &tbl) != nil {
			return
		}
		st, err := compileTable(&tbl)
		if err != nil {
			return
		}
		if !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \r\n\t#") {
			target = "/"
		}
		// net/http's server refuses what does not parse as a URL before a
		// handler sees it; so does this harness.
		req, err := http.NewRequest("GET", "http://x"+target, nil)
		if err != nil {
			return
		}
		req.Host = host
		p, err := cleanPath(req)
		if err != nil {
			return
		}
		idx, steps, err := st.pick(req, p)
		if err == nil && (idx < -1 || idx >= len(tbl.Policies)) {
			t.Fatalf("picked policy %d of %d", idx, len(tbl.Policies))
		}
		// Every input a regular expression runs over here is at most as
		// long as the longest of these.
		if bound := cache.MaxHostRegexInsts * max(len(p), len(req.URL.RawQuery), len(host)); steps > bound {
			t.Fatalf("%d regex steps, more than %d", steps, bound)
		}
	})
}

// FuzzExclusionRules: what a table's exclusions render to is only the
// three directives Portal writes, one per line, never anything a tag or id
// could smuggle in.
func FuzzExclusionRules(f *testing.F) {
	f.Add(int64(942100), "attack-sqli", int32(10))
	f.Add(int64(-1), "a\nSecRuleEngine Off", int32(0))
	f.Add(int64(1), "x\" \"id:1,pass", int32(20000))
	f.Fuzz(func(t *testing.T, id int64, tag string, th int32) {
		out, err := ExclusionRules(&cache.Exclusions{RuleIDs: []int64{id}, Tags: []string{tag}, InboundAnomalyThreshold: th})
		if err != nil {
			return
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			ok := strings.HasPrefix(line, "#") || strings.HasPrefix(line, "SecRuleRemoveById ") ||
				strings.HasPrefix(line, "SecRuleRemoveByTag ") || strings.HasPrefix(line, "SecAction \"id:999999901,")
			if !ok || strings.Count(line, "\"") > 2 {
				t.Fatalf("unexpected line %q from id %d tag %q threshold %d", line, id, tag, th)
			}
		}
	})
}
