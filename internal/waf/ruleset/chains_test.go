package ruleset

import (
	"fmt"
	"strings"
	"testing"
)

var transformNames = []string{"lowercase", "uppercase", "trim", "compressWhitespace", "urlDecode", "removeNulls", "htmlEntityDecode", "length"}

// tchain returns n t: actions spelling seed in base 8, so that chains of 16
// or more differ for every seed below 2^48.
func tchain(seed, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, ",t:%s", transformNames[(seed>>(3*(i%16)))&7])
	}
	return b.String()
}

func TestTransformationLimits(t *testing.T) {
	rule := func(id, n int) string {
		return fmt.Sprintf("SecRule ARGS \"@rx x\" \"id:%d,phase:1,pass,t:none%s\"\n", id, tchain(id, n))
	}
	many := func(rules, n int) string {
		var b strings.Builder
		for id := 1; id <= rules; id++ {
			b.WriteString(rule(id, n))
		}
		return b.String()
	}
	for _, tc := range []struct {
		name, rules string
		want        string // "" compiles
	}{
		{"longest chain allowed", rule(1, MaxTransformChain), ""},
		{"one transformation too many", rule(1, MaxTransformChain+1), "17 transformations after its last t:none"},
		{"t:none resets the chain", "SecRule ARGS \"@rx x\" \"id:1,phase:1,pass" + tchain(2, 10) + ",t:none" + tchain(3, 10) + "\"\n", ""},
		{"updates count", rule(1, 10) + "SecRuleUpdateActionById 1 \"t:lowercase" + tchain(3, 9) + "\"\n", "20 transformations"},
		{"rules within the total", many(256, 16), ""},
		{"rules over the total", many(300, 15), "more than 4096 transformations"},
		{"an update extends the CRS's chains", "Include @coraza.conf-recommended\nInclude @crs-setup.conf.example\nInclude @owasp_crs/*.conf\nSecRuleUpdateActionById 942100 \"t:trim" + tchain(6, 9) + "\"\n", "17 transformations"},
		{"range update counted once per rule it reaches", many(300, 1) + "SecRuleUpdateActionById 1-300 \"t:trim" + tchain(5, 13) + "\"\n", "more than 4096 transformations"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Compile(Join([]Source{{Name: "t", Rules: tc.rules}}), Options{})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("want it compiled, got %v", err)
				}
				_ = c.Close()
				return
			}
			e, ok := AsError(err)
			if !ok || e.Kind() != KindTooLarge || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want TooLarge %q, got %v", tc.want, err)
			}
		})
	}
}

// TestTransformChainsCannotFillMemory: Coraza keeps every distinct
// transformation chain for the life of the process, spelled out in full. One
// rule with thousands of transformations (36 KiB) kept 41 MiB alive, even
// though it compiled and its WAF was closed; the rule set is refused instead.
func TestTransformChainsCannotFillMemory(t *testing.T) {
	before := liveHeap()
	for round := range 4 {
		rules := fmt.Sprintf("SecRule ARGS \"@rx x\" \"id:1,phase:1,pass,t:none%s\"\n", tchain(round, 3000))
		c, err := Compile(Join([]Source{{Name: "t", Rules: rules}}), Options{})
		if err == nil {
			_ = c.Close()
		}
		if e, ok := AsError(err); !ok || e.Kind() != KindTooLarge {
			t.Errorf("round %d: want TooLarge, got %v", round, err)
		}
	}
	grew := int64(liveHeap()) - int64(before)
	t.Logf("live heap grew by %d KiB", grew>>10)
	if limit := int64(4 << 20); grew > limit {
		t.Fatalf("live heap grew by %d MiB over 4 rule sets of long transformation chains (limit %d MiB)", grew>>20, limit>>20)
	}
}

// BenchmarkTransformChainGrowth compiles rule sets at the limits (256 rules
// of 16 transformations) whose chains no earlier compile had, and reports
// the live heap Coraza's chain registry keeps per compile.
func BenchmarkTransformChainGrowth(b *testing.B) {
	before := liveHeap()
	round := 0
	for b.Loop() {
		var rules strings.Builder
		benchRound++
		for id := 1; id <= 256; id++ {
			// t:none first, then a chain no earlier round had.
			fmt.Fprintf(&rules, "SecRule ARGS \"@rx x\" \"id:%d,phase:1,pass,t:none%s\"\n", id, tchain(benchRound*256+id, MaxTransformChain))
		}
		c, err := Compile(Join([]Source{{Name: "t", Rules: rules.String()}}), Options{})
		if err != nil {
			b.Fatal(err)
		}
		_ = c.Close()
		round++
	}
	b.ReportMetric(float64(int64(liveHeap())-int64(before))/float64(round), "retained-heap-B/op")
}

// TestTransformationChainsCounted: the count Portal publishes moves with the
// chains a compile registers.
func TestTransformationChainsCounted(t *testing.T) {
	// Names no other test chains, spelling a number new to the process:
	// the prefixes after its first differing name are new.
	names := []string{"sha1", "md5", "hexEncode", "base64Encode", "normalizePath", "replaceComments", "escapeSeqDecode", "cmdLine"}
	benchRound++
	var chain strings.Builder
	for i := range MaxTransformChain {
		fmt.Fprintf(&chain, ",t:%s", names[(benchRound>>(3*i))&7])
	}
	before := TransformationChains()
	rules := fmt.Sprintf("SecRule ARGS \"@rx x\" \"id:1,phase:1,pass,t:none%s\"\n", chain.String())
	c := mustCompile(t, Join([]Source{{Name: "t", Rules: rules}}))
	_ = c.Close()
	if got := TransformationChains() - before; got < MaxTransformChain/2 {
		t.Fatalf("the count moved by %d after a compile of a new chain of %d", got, MaxTransformChain)
	}
}
