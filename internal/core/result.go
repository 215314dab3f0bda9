package core

import "unicode/utf8"

// Outcome is the verdict of one rule on one object (or one of its containers).
type Outcome string

const (
	OutcomePass  Outcome = "pass"
	OutcomeFail  Outcome = "fail"
	OutcomeError Outcome = "error"
	// OutcomeSkip: an exception exempts the object from the rule, which was
	// not evaluated. Result.Exception names it.
	OutcomeSkip Outcome = "skip"
)

// ResourceRef identifies the object a result is about.
type ResourceRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	UID        string `json:"uid,omitempty"`
}

// Result is what a rule said about an object. A container-scoped rule yields one
// failing Result per offending container, or a single passing Result.
type Result struct {
	Rule     *Rule
	Resource ResourceRef
	Outcome  Outcome
	// Container and ContainerType name the container that failed, for
	// container-scoped rules. ContainerType is "container", "initContainer" or
	// "ephemeralContainer".
	Container     string
	ContainerType string
	// Message is the rule's rendered message for failures, and the error text
	// for errors.
	Message string
	// Err is the evaluation error behind OutcomeError (errors.Is it
	// ErrBudgetExceeded when the rule ran out of its budget); on
	// OutcomeFail, the budget error a hole of the message ran into, if
	// any (the verdict stands, the message shows the error in the hole).
	Err error `json:"-"`
	// Exception is the exception behind OutcomeSkip; on a failing result,
	// an exception of mode actions only, which keeps the rule's response
	// actions off the object while the violation is still reported.
	Exception *Exception `json:"-"`
}

// Denies reports whether this result rejects an admission request.
func (r Result) Denies() bool {
	switch r.Outcome {
	case OutcomeFail:
		return r.Rule.EnforcementAction == ActionDeny
	case OutcomeError:
		return r.Rule.OnError == OnErrorDeny
	}
	return false
}

// MaxOutputMessageBytes bounds a finding's message in every output (reports,
// alerts, logs), whatever produced it: the engine renders at most 4 KiB, and
// the outputs hold every other producer to the same.
const MaxOutputMessageBytes = 4096

// MaxEventNoteBytes is the longest note the API server accepts in an
// events.k8s.io/v1 Event; a longer one is rejected and the Event lost.
const MaxEventNoteBytes = 1024

// Truncate cuts s to at most max bytes on a character boundary, marking the
// cut: how every output bounds a free-text field a tenant controls.
func Truncate(s string, limit int) string {
	const mark = " [truncated]"
	if len(s) <= limit {
		return s
	}
	n := max(limit-len(mark), 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + mark
}
