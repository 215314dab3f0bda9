// Package forward carries the verdicts a replica that does not lead
// produces (admission's, and runtime's from a replica's own audit log) to
// the leader, which runs the actions. It is shared infrastructure between
// the producers of verdicts and the actions engine, and imports no layer:
// the sender is a core.VerdictSink, the receiver hands what it accepts to
// another one.
//
// The wire carries a reference to the rule, never the rule itself: the
// leader acts only on a rule it holds, with the actions it holds for it, so
// even a caller that got past authentication cannot make it run an action
// no rule of its own asks for.
package forward

import (
	"time"

	"github.com/vilaca/portal/internal/core"
)

// Path is where the leader accepts forwarded verdicts, on the webhook
// server.
const Path = "/forward/verdicts"

// Bounds of the wire.
const (
	// MaxBatch is the most verdicts one request carries.
	MaxBatch = 100
	// MaxBodyBytes bounds one request's body: MaxBatch verdicts with their
	// messages at core.MaxOutputMessageBytes, and room for the rest.
	MaxBodyBytes = 1 << 20
)

// Batch is one request's body.
type Batch struct {
	Verdicts []Verdict `json:"verdicts"`
}

// Verdict is a core.Verdict on the wire.
type Verdict struct {
	// ID is the sender's name for this verdict, random and kept across
	// retries: the leader acts on an ID once, however often it arrives.
	ID        string           `json:"id"`
	Rule      RuleRef          `json:"rule"`
	Resource  core.ResourceRef `json:"resource"`
	Message   string           `json:"message,omitempty"`
	Operation string           `json:"operation,omitempty"`
	Denied    bool             `json:"denied,omitempty"`
	Observed  time.Time        `json:"observed"`
	Mode      core.Mode        `json:"mode,omitempty"`
}

// RuleRef names a rule as the actions' idempotency key does: where it came
// from, its namespace (a PortalRule's) and its name.
type RuleRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// RefOf is the reference to r.
func RefOf(r *core.Rule) RuleRef {
	return RuleRef{Kind: r.Source.Kind, Namespace: r.Namespace, Name: r.Name}
}

// encode is v on the wire, with id.
func encode(id string, v *core.Verdict) Verdict {
	return Verdict{
		ID: id, Rule: RefOf(v.Rule), Resource: v.Resource,
		Message:   core.Truncate(v.Message, core.MaxOutputMessageBytes),
		Operation: v.Operation, Denied: v.Denied, Observed: v.Observed, Mode: v.Mode,
	}
}

// decode is w as a verdict of rule r.
func decode(w *Verdict, r *core.Rule) core.Verdict {
	return core.Verdict{
		Result:    core.Result{Rule: r, Resource: w.Resource, Outcome: core.OutcomeFail, Message: w.Message},
		Operation: w.Operation, Denied: w.Denied, Observed: w.Observed, Mode: w.Mode,
	}
}
