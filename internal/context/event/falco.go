package event

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/vilaca/portal/internal/core"
)

// FalcoAlert is one alert in the JSON Falco's http_output and Falcosidekick
// post (json_output: true): the input Falco Talon takes.
type FalcoAlert struct {
	UUID         string         `json:"uuid,omitempty"`
	Output       string         `json:"output"`
	Priority     string         `json:"priority"`
	Rule         string         `json:"rule"`
	Time         time.Time      `json:"time"`
	Source       string         `json:"source,omitempty"`
	Hostname     string         `json:"hostname,omitempty"`
	Tags         []string       `json:"tags,omitempty"`
	OutputFields map[string]any `json:"output_fields"`
}

// The output fields that name the pod an alert is about (Falco's k8s and
// container fields).
const (
	FieldNamespace = "k8s.ns.name"
	FieldPod       = "k8s.pod.name"
)

// FalcoPriorities are Falco's priorities, most severe first.
var falcoPriorities = []string{"Emergency", "Alert", "Critical", "Error", "Warning", "Notice", "Informational", "Debug"}

// DecodeFalco reads one Falco alert and turns it into an event about the
// pod its output fields name. An alert that names no pod (a host process)
// becomes an event without an object, which no rule matches.
func DecodeFalco(data []byte) (Event, error) {
	var a FalcoAlert
	if err := json.Unmarshal(data, &a); err != nil {
		return Event{}, fmt.Errorf("decode Falco alert: %w", err)
	}
	if a.Rule == "" {
		return Event{}, fmt.Errorf("decode Falco alert: no rule")
	}
	if !slices.Contains(falcoPriorities, a.Priority) {
		return Event{}, fmt.Errorf("decode Falco alert: priority %q is not one of %v", a.Priority, falcoPriorities)
	}
	a.bound()
	ev := Event{Kind: "Event", APIVersion: "falco", AuditID: a.UUID, Stage: StageResponseComplete, Verb: "falco",
		StageTimestamp: a.Time, RequestReceivedTimestamp: a.Time, Falco: &a}
	ns, _ := a.OutputFields[FieldNamespace].(string)
	pod, _ := a.OutputFields[FieldPod].(string)
	if ns != "" && pod != "" {
		ev.ObjectRef = &ObjectRef{Resource: "pods", APIVersion: "v1", Namespace: ns, Name: pod}
	}
	return ev, nil
}

// DecodeRecorded reads one line of a recorded event log: an API server
// audit event, or a Falco alert as Falco's json_output writes it (to a
// file or a program's stdin), so one log can replay both inputs in order.
// A line is a Falco alert when it is not an audit event and names a Falco
// rule and priority.
func DecodeRecorded(line []byte) (Event, error) {
	ev, err := DecodeLine(line)
	if err == nil {
		return ev, nil
	}
	var probe struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
		Rule       string `json:"rule"`
		Priority   string `json:"priority"`
	}
	if json.Unmarshal(line, &probe) != nil || probe.Kind != "" || probe.APIVersion != "" || probe.Rule == "" || probe.Priority == "" {
		return Event{}, err
	}
	return DecodeFalco(line)
}

func (a *FalcoAlert) bound() {
	for _, p := range []*string{&a.UUID, &a.Rule, &a.Source, &a.Hostname} {
		*p = core.Truncate(*p, MaxStringBytes)
	}
	a.Output = core.Truncate(a.Output, maxFalcoOutBytes)
	a.Tags = boundList(a.Tags, MaxTags)
	keys := slices.Sorted(maps.Keys(a.OutputFields))
	out := make(map[string]any, min(len(keys), MaxOutputFields))
	for _, k := range keys[:min(len(keys), MaxOutputFields)] {
		// Output fields are strings, numbers, booleans or null; anything
		// else is rendered, so no nested value of unbounded depth reaches
		// a rule.
		switch v := a.OutputFields[k].(type) {
		case string:
			out[core.Truncate(k, MaxStringBytes)] = core.Truncate(v, MaxStringBytes)
		case float64, bool, nil:
			out[core.Truncate(k, MaxStringBytes)] = v
		default:
			b, _ := json.Marshal(v)
			out[core.Truncate(k, MaxStringBytes)] = core.Truncate(string(b), MaxStringBytes)
		}
	}
	a.OutputFields = out
}
