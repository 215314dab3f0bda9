package regexbound

import (
	"regexp/syntax"
	"strings"
	"testing"
)

// TestEstimateNeverRefusesWhatFits: whatever the estimate refuses outright
// compiles to more than the bound, so the estimate only saves work; and a
// pattern that fits is counted exactly.
func TestEstimateNeverRefusesWhatFits(t *testing.T) {
	for _, p := range []string{
		`a{1000}a{999}`, `(?:a){999}`, `.{1000}`, `(ab){600}`, `[a-z]{1000}`, `(a|b|c){400}`, `x*y+z?`,
		`^tmp-[a-z0-9]{1,20}$`, `(?i)hello|world`, `a{2,1000}`, `((a{10}){10}){10}`,
	} {
		re, err := syntax.Parse(p, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			t.Fatal(err)
		}
		real, est := len(prog.Inst), estimate(re)
		if est > 2*int64(real)+64 {
			t.Errorf("%s: estimated %d, real %d: the estimate would refuse a pattern it should count", p, est, real)
		}
		n, err := Insts(p, 4096, real)
		if err != nil || n != real {
			t.Errorf("%s: Insts = %d, %v; want %d", p, n, err, real)
		}
	}
}

// TestInstsRefuses: patterns past either bound are refused with what to fix,
// the huge ones without being compiled.
func TestInstsRefuses(t *testing.T) {
	for p, want := range map[string]string{
		strings.Repeat(".{1000}", 2300): "longer than 4096",
		strings.Repeat(".{1000}", 500):  "instructions, more than 2000",
		`(abc|def){400}`:                "instructions, more than 2000",
		`.{1000}.{1000}.{1000}`:         "instructions, more than 2000",
		`(`:                             "not a valid RE2 expression",
	} {
		if _, err := Insts(p, 4096, 2000); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.30s: %v, want an error containing %q", p, err, want)
		}
	}
}
