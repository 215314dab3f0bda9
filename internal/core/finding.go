package core

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"time"
)

// Finding is a failing or erroring rule result that stays open until a later
// evaluation of the same object no longer produces it: the object was fixed,
// deleted, or the rule no longer applies to it.
type Finding struct {
	Result
	// Producer names the part of Portal that raised the finding ("audit"):
	// the findings pipeline sets it, so one producer's findings never pass
	// for another's.
	Producer string
	// FirstSeen is when the loop first saw this finding on the object. It
	// survives re-evaluations and message changes; it resets when the
	// finding clears and comes back.
	FirstSeen time.Time
}

// FindingID identifies a finding of one object across evaluations: its
// producer, the rule (by its source, so a PortalRule and a PortalClusterRule
// of the same name stay apart) and, for container-scoped rules, the
// container.
type FindingID struct {
	Producer      string
	RuleKind      string
	RuleNamespace string
	RuleName      string
	Container     string
}

// ID returns the finding's identity.
func (f *Finding) ID() FindingID {
	id := FindingID{Producer: f.Producer, Container: f.Container}
	if f.Rule != nil {
		id.RuleKind, id.RuleNamespace, id.RuleName = f.Rule.Source.Kind, f.Rule.Namespace, f.Rule.Name
	}
	return id
}

// ResultID is the finding's stable identity in reports: a hash of its
// producer, its rule (source kind, namespace, name), the object (API group,
// kind, namespace, name) and the container. It is the same for every
// evaluation that raises the finding again, on any replica and across
// restarts, and differs when any of those differs. The object's API version
// and UID are left out, so a kind served at a new version, or an object
// deleted and recreated under its name, keeps its results' identity.
// Policy Reporter deduplicates notifications by it (properties.resultID).
func (f *Finding) ResultID() string {
	id := f.ID()
	group := ""
	if g, _, ok := strings.Cut(f.Resource.APIVersion, "/"); ok {
		group = g // "v1" alone is the core group
	}
	h := sha256.New()
	for _, part := range []string{"portal.result/v1", id.Producer, id.RuleKind, id.RuleNamespace, id.RuleName,
		group, f.Resource.Kind, f.Resource.Namespace, f.Resource.Name, id.Container} {
		// Length-prefixed, so no two field lists hash the same.
		h.Write(binary.AppendUvarint(nil, uint64(len(part))))
		h.Write([]byte(part))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Severity is the severity of the finding's rule.
func (f *Finding) Severity() Severity {
	if f.Rule == nil {
		return ""
	}
	return f.Rule.Severity
}

// Category is the category of the finding's rule; "" when it has none.
func (f *Finding) Category() string {
	if f.Rule == nil {
		return ""
	}
	return f.Rule.Category
}

// RuleName is the name of the finding's rule.
func (f *Finding) RuleName() string {
	if f.Rule == nil {
		return ""
	}
	return f.Rule.Name
}

// ObjectKey identifies an object for the outputs, whatever its UID: a
// deleted and recreated object is the same entry in a report.
type ObjectKey struct {
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
}

// Key returns the object key of the resource.
func (r ResourceRef) Key() ObjectKey {
	return ObjectKey{APIVersion: r.APIVersion, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}
}

// ObjectFindings is the current state of one object: every finding open on it.
type ObjectFindings struct {
	Object ResourceRef
	// Findings is empty when the object has none: it was fixed, deleted, or
	// no rule applies to it any more. Sinks then clear what they hold for it.
	Findings []Finding
	// Observed is when the event that led to this state was observed (the
	// informer event), for latency metrics; zero when unknown.
	Observed time.Time
}

// FindingBatch is what a loop hands its sinks: the current state of the
// objects whose findings changed since the previous batch.
type FindingBatch struct {
	// Full marks the complete state: every object with findings is in
	// Objects, and any object a sink holds that is not listed has none. A
	// sink receives a full batch first, each time it is (re)started, for
	// example when its replica becomes the leader.
	Full    bool
	Objects []ObjectFindings
}

// OutputSink receives findings: a PolicyReport writer, an Alertmanager
// client, a metrics exporter, a log. Sinks are state-based: each batch says
// what is true now for the objects in it, so a batch applied twice changes
// nothing, and a sink that lost track recovers from the next full batch.
//
// Publish is never called concurrently. An error makes the loop retry the
// same objects later, with backoff.
//
// A sink runs only on the elected leader, unless it implements
// NeedLeaderElection() bool and returns false.
type OutputSink interface {
	Name() string
	Publish(ctx context.Context, b FindingBatch) error
}

// RunnableSink is a sink with background work, such as retries and periodic
// re-sends. Run is called before the first Publish and returns when ctx
// ends. A RunnableSink delivers after Publish returns: it calls delivered
// with ObjectFindings.Observed of each state it has delivered, so the loop
// can measure the time from event to delivery.
type RunnableSink interface {
	OutputSink
	Run(ctx context.Context, delivered func(observed time.Time))
}
