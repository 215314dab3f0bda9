package core

import "time"

// Verdict is one failing admission rule result on an admitted or refused
// request, handed from admission to the response actions. Admission
// verdicts are events, not state: a refused object never exists, so they do
// not go through the findings pipeline (which holds the current state of
// objects, and would keep a refused object in reports for ever).
type Verdict struct {
	// Result.Resource.UID is the reviewed object's UID: the actions act
	// only on the live object with exactly that UID, and not at all
	// without one.
	Result
	// Operation is the admission operation (CREATE, UPDATE, DELETE, CONNECT).
	Operation string
	// Denied is true when the request was refused.
	Denied bool
	// Observed is when admission decided.
	Observed time.Time
	// Mode is the loop the verdict comes from: admission (empty) or
	// runtime, whose events are verdicts too (an exec happened once; there
	// is no state to clear).
	Mode Mode
}

// LoopMode is the verdict's loop: Mode, or admission when unset.
func (v *Verdict) LoopMode() Mode {
	if v.Mode == "" {
		return ModeAdmission
	}
	return v.Mode
}

// VerdictSink receives admission verdicts for the response actions. Offer
// must never block and never fail the request: admission calls it on its
// hot path, after deciding. A sink that cannot take the verdict (its queue
// is full, this replica is not the leader) counts and logs the drop itself.
type VerdictSink interface {
	Offer(v Verdict)
}

// WantsVerdict reports whether a failing admission result has an action to
// run, so admission hands over nothing for rules without actions.
func (r Result) WantsVerdict() bool { return r.WantsVerdictIn(ModeAdmission) }

// WantsVerdictIn reports whether a failing result of loop m has an action
// to run there. An exempted result has none.
func (r Result) WantsVerdictIn(m Mode) bool {
	if r.Outcome != OutcomeFail || r.Rule == nil || r.Exception != nil {
		return false
	}
	for i := range r.Rule.Actions {
		a := &r.Rule.Actions[i]
		if len(a.Modes) == 0 || contains(a.Modes, m) {
			return true
		}
	}
	return false
}

func contains(ms []Mode, m Mode) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}
