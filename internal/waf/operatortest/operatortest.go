// Package operatortest holds what unit tests of Portal's Coraza operators
// (internal/waf/rx, internal/waf/pm) share: the part of a transaction an
// operator uses, without a WAF.
package operatortest

import "github.com/corazawaf/coraza/v3/experimental/plugins/plugintypes"

// Tx is a transaction for Operator.Evaluate: Capture says whether the rule
// captures, and Fields receives what the operator captures (TX:0, TX:1,
// ...). Its other methods are not implemented and panic.
type Tx struct {
	plugintypes.TransactionState
	Capture bool
	Fields  map[int]string
}

func (t *Tx) Capturing() bool { return t.Capture }

func (t *Tx) CaptureField(i int, v string) {
	if t.Fields == nil {
		t.Fields = map[int]string{}
	}
	t.Fields[i] = v
}
