package ruleset

import (
	"strings"
	"sync"
	_ "unsafe" // go:linkname
)

// Coraza v3.8.1 numbers every distinct transformation chain ("+lowercase",
// "+lowercase+trim", ...) in a process-wide registry that nothing ever
// empties (corazawaf.transformationID): each t: action a rule gets adds the
// chain it now has, spelled out in full. A rule with n transformations adds
// n chains of up to n names, so 36 KiB of "t:..." on one rule kept 41 MiB
// alive, and a 4 MiB rule set would keep gigabytes, on every replica and
// every data plane, even when it compiles. The pre-check bounds both
// factors: the length of a rule's chain and the transformations a rule set
// applies. The Core Rule Set's own chains (at most 7 long, 840 t: actions in
// all, about 60 chains) are the same in every compile and are not counted,
// except as what an update can extend.
const (
	// MaxTransformChain bounds the transformations a rule can have after
	// its last t:none, counting those SecRuleUpdateActionById adds.
	// (Coraza refuses transformations in SecDefaultAction.)
	MaxTransformChain = 16
	// MaxTransformations bounds the transformations a rule set applies:
	// those of its rules, and those of each SecRuleUpdateActionById times
	// the rules it can reach.
	MaxTransformations = 4096
	// crsRuleAllowance is how many Core Rule Set rules an update by id range
	// is assumed to reach once a CRS file is included (the embedded CRS has
	// about 700 SecRule and SecAction directives).
	crsRuleAllowance = 1024
	// crsLongestChain is the longest chain of a Core Rule Set rule, which
	// an update can extend.
	crsLongestChain = 7
)

// transforms is the pre-check's count of transformations.
type transforms struct {
	// updates is what the SecRuleUpdateActionByIds add to a rule, at most.
	updates int
	// longest is the longest chain of a rule so far, without updates.
	longest int
	// rules counts the rules a later update can reach.
	rules int
	total int
	// reported stops a second report of the total.
	reported bool
}

// chainOf returns the transformations an action list adds after its last
// t:none. Coraza resets on exactly "none".
func chainOf(list []action) int {
	n := 0
	for _, a := range list {
		switch {
		case a.Key != "t":
		case a.Value == "none":
			n = 0
		default:
			n++
		}
	}
	return n
}

func (c *checker) transformRule(d directive, list []action) {
	t := &c.transforms
	n := chainOf(list)
	t.rules++
	t.total += n
	t.longest = max(t.longest, n)
	c.transformLimits(d, n+t.updates)
}

func (c *checker) transformUpdate(d directive, list []action) {
	t := &c.transforms
	n := chainOf(list)
	if n == 0 {
		return // also when there are no ids: updateActions found no actions
	}
	t.updates += n
	// Everything before the actions is ids and ranges (updateActions).
	f := strings.Fields(d.Opts)
	reach := 0
	for _, r := range idRanges(strings.Join(f[:len(f)-1], " ")) {
		reach += max(min(r[1]-r[0]+1, t.rules+c.crsRules()), 0)
	}
	t.total += n * max(reach, 1)
	longest := t.longest
	if c.includedCRS {
		longest = max(longest, crsLongestChain)
	}
	c.transformLimits(d, longest+t.updates)
}

func (c *checker) crsRules() int {
	if c.includedCRS {
		return crsRuleAllowance
	}
	return 0
}

func (c *checker) transformLimits(d directive, chain int) {
	if chain > MaxTransformChain {
		c.add(KindTooLarge, d, "a rule here has %d transformations after its last t:none, counting those SecRuleUpdateActionById adds; at most %d are allowed, because Coraza keeps every distinct transformation chain for the life of the process: start the rule with t:none and use fewer transformations",
			chain, MaxTransformChain)
	}
	if t := &c.transforms; t.total > MaxTransformations && !t.reported {
		t.reported = true
		c.add(KindTooLarge, d, "the rule set applies more than %d transformations (t: actions, those of SecRuleUpdateActionById once per rule it can reach), because Coraza keeps every distinct transformation chain for the life of the process: use fewer transformations or split the RuleSet",
			MaxTransformations)
	}
}

// The registry itself, read under its own lock to publish its size; see
// memo.go for why go:linkname.
var (
	//go:linkname chainNames github.com/corazawaf/coraza/v3/internal/corazawaf.transformationIDToName
	chainNames []string
	//go:linkname chainLock github.com/corazawaf/coraza/v3/internal/corazawaf.transformationIDsLock
	chainLock sync.Mutex
)

// TransformationChains returns how many distinct transformation chains
// Coraza has registered in this process. It never decreases.
func TransformationChains() int {
	chainLock.Lock()
	defer chainLock.Unlock()
	return len(chainNames)
}
