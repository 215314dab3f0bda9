// Package event is the runtime event context: the audit.k8s.io/v1 events
// the API server sends (webhook backend or log file) and Falco's alerts,
// decoded with bounds, sorted into named event classes, and turned into the
// event.* names a rule of mode runtime sees.
//
// It is a foundation, not a layer: the runtime layer evaluates events with
// it, the rule loader checks the class names rules list against it, and
// `portal eval --events` replays a recorded audit log through it.
package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vilaca/portal/internal/core"
)

// Bounds of one event: whoever can make an API request chooses its user
// agent and object names, and a Falco rule's output fields come from the
// workload, so nothing from an event reaches a rule unbounded.
const (
	MaxStringBytes   = 1024
	MaxGroups        = 64
	MaxSourceIPs     = 16
	MaxAnnotations   = 32
	MaxOutputFields  = 64
	MaxTags          = 32
	maxMessageBytes  = 4096
	maxFalcoOutBytes = 4096
)

// Stages of an audit event, as the API server names them.
const (
	StageRequestReceived  = "RequestReceived"
	StageResponseStarted  = "ResponseStarted"
	StageResponseComplete = "ResponseComplete"
	StagePanic            = "Panic"
)

// UserInfo is who made a request (authentication.k8s.io/v1 UserInfo).
type UserInfo struct {
	Username string              `json:"username,omitempty"`
	UID      string              `json:"uid,omitempty"`
	Groups   []string            `json:"groups,omitempty"`
	Extra    map[string][]string `json:"extra,omitempty"`
}

// ObjectRef names the object a request is about.
type ObjectRef struct {
	Resource        string `json:"resource,omitempty"`
	Namespace       string `json:"namespace,omitempty"`
	Name            string `json:"name,omitempty"`
	UID             string `json:"uid,omitempty"`
	APIGroup        string `json:"apiGroup,omitempty"`
	APIVersion      string `json:"apiVersion,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Subresource     string `json:"subresource,omitempty"`
}

// Status is the part of a response's metav1.Status a rule sees.
type Status struct {
	Code    int32  `json:"code,omitempty"`
	Status  string `json:"status,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Event is one audit.k8s.io/v1 Event. requestObject and responseObject are
// not decoded at all: a Secret's contents, or any object's, never reach a
// rule through an event (the target object comes from the cluster cache,
// and never for Secrets).
type Event struct {
	Kind                     string            `json:"kind,omitempty"`
	APIVersion               string            `json:"apiVersion,omitempty"`
	Level                    string            `json:"level,omitempty"`
	AuditID                  string            `json:"auditID,omitempty"`
	Stage                    string            `json:"stage,omitempty"`
	RequestURI               string            `json:"requestURI,omitempty"`
	Verb                     string            `json:"verb,omitempty"`
	User                     UserInfo          `json:"user"`
	ImpersonatedUser         *UserInfo         `json:"impersonatedUser,omitempty"`
	SourceIPs                []string          `json:"sourceIPs,omitempty"`
	UserAgent                string            `json:"userAgent,omitempty"`
	ObjectRef                *ObjectRef        `json:"objectRef,omitempty"`
	ResponseStatus           *Status           `json:"responseStatus,omitempty"`
	RequestReceivedTimestamp time.Time         `json:"requestReceivedTimestamp,omitzero"`
	StageTimestamp           time.Time         `json:"stageTimestamp,omitzero"`
	Annotations              map[string]string `json:"annotations,omitempty"`

	// Falco is set on an event made from a Falco alert.
	Falco *FalcoAlert `json:"-"`
}

// EventList is a batch of events, as the audit webhook backend posts them.
type EventList struct {
	Kind       string  `json:"kind,omitempty"`
	APIVersion string  `json:"apiVersion,omitempty"`
	Items      []Event `json:"items"`
}

// DecodeList reads an audit.k8s.io/v1 EventList. It refuses another
// kind or version, and more than maxItems events. The items are decoded one
// at a time and counted as they come: decoded whole, a body of empty items
// ({},{},...) takes hundreds of bytes of memory per byte sent before the
// count could refuse it.
func DecodeList(data []byte, maxItems int) ([]Event, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	var (
		kind, apiVersion string
		items            []Event
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("decode EventList: %w", err)
		}
		key, _ := tok.(string)
		switch key {
		case "kind":
			err = dec.Decode(&kind)
		case "apiVersion":
			err = dec.Decode(&apiVersion)
		case "items":
			items, err = decodeItems(dec, maxItems)
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return nil, fmt.Errorf("decode EventList: %w", err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	if kind != "EventList" || apiVersion != "audit.k8s.io/v1" {
		return nil, fmt.Errorf("decode EventList: kind %q apiVersion %q, want EventList audit.k8s.io/v1", kind, apiVersion)
	}
	return items, nil
}

// decodeItems reads the items array, refusing it at its maxItems+1st event.
func decodeItems(dec *json.Decoder, maxItems int) ([]Event, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, nil // "items": null, an empty batch
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, fmt.Errorf("items: want an array, got %v", tok)
	}
	var items []Event
	for dec.More() {
		if len(items) == maxItems {
			return nil, fmt.Errorf("more than %d events", maxItems)
		}
		var ev Event
		if err := dec.Decode(&ev); err != nil {
			return nil, err
		}
		ev.Bound()
		items = append(items, ev)
	}
	return items, expectDelim(dec, ']')
}

// expectDelim reads the next token and refuses anything but d.
func expectDelim(dec *json.Decoder, d json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("decode EventList: %w", err)
	}
	if got, ok := tok.(json.Delim); !ok || got != d {
		return fmt.Errorf("decode EventList: want %q, got %v", d, tok)
	}
	return nil
}

// DecodeLine reads one event of a JSON-lines audit log.
func DecodeLine(line []byte) (Event, error) {
	var ev Event
	if err := json.Unmarshal(line, &ev); err != nil {
		return Event{}, fmt.Errorf("decode audit event: %w", err)
	}
	if ev.Kind != "Event" || ev.APIVersion != "audit.k8s.io/v1" {
		return Event{}, fmt.Errorf("decode audit event: kind %q apiVersion %q, want Event audit.k8s.io/v1", ev.Kind, ev.APIVersion)
	}
	ev.Bound()
	return ev, nil
}

// Bound cuts every field a requester chooses to the package's bounds.
func (ev *Event) Bound() {
	s := func(p *string) { *p = core.Truncate(*p, MaxStringBytes) }
	for _, p := range []*string{&ev.AuditID, &ev.Stage, &ev.RequestURI, &ev.Verb, &ev.UserAgent, &ev.Level} {
		s(p)
	}
	boundUser(&ev.User)
	if ev.ImpersonatedUser != nil {
		boundUser(ev.ImpersonatedUser)
	}
	ev.SourceIPs = boundList(ev.SourceIPs, MaxSourceIPs)
	if r := ev.ObjectRef; r != nil {
		for _, p := range []*string{&r.Resource, &r.Namespace, &r.Name, &r.UID, &r.APIGroup, &r.APIVersion, &r.ResourceVersion, &r.Subresource} {
			s(p)
		}
	}
	if st := ev.ResponseStatus; st != nil {
		s(&st.Status)
		s(&st.Reason)
		st.Message = core.Truncate(st.Message, maxMessageBytes)
	}
	ev.Annotations = boundMap(ev.Annotations, MaxAnnotations)
}

func boundUser(u *UserInfo) {
	u.Username = core.Truncate(u.Username, MaxStringBytes)
	u.UID = core.Truncate(u.UID, MaxStringBytes)
	u.Groups = boundList(u.Groups, MaxGroups)
	// extra carries credential ids and bound-token claims: not shown to
	// rules, so it is dropped rather than bounded.
	u.Extra = nil
}

func boundList(l []string, n int) []string {
	if len(l) > n {
		l = l[:n]
	}
	for i := range l {
		l[i] = core.Truncate(l[i], MaxStringBytes)
	}
	return l
}

// boundMap keeps the n smallest keys, so which entries survive does not
// depend on map order.
func boundMap(m map[string]string, n int) map[string]string {
	if len(m) == 0 {
		return m
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make(map[string]string, min(n, len(keys)))
	for _, k := range keys[:min(n, len(keys))] {
		out[core.Truncate(k, MaxStringBytes)] = core.Truncate(m[k], MaxStringBytes)
	}
	return out
}

// ServiceAccount returns the namespace and name of the ServiceAccount the
// user is, from its username (system:serviceaccount:NS:NAME).
func (u *UserInfo) ServiceAccount() (namespace, name string, ok bool) {
	rest, found := strings.CutPrefix(u.Username, "system:serviceaccount:")
	if !found {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	if !ok || namespace == "" || name == "" || strings.Contains(name, ":") {
		return "", "", false
	}
	return namespace, name, true
}

// Namespace is the namespace of the event's object ("" for a
// cluster-scoped one or none): what decides which PortalRules see it.
func (ev *Event) Namespace() string {
	if ev.ObjectRef == nil {
		return ""
	}
	return ev.ObjectRef.Namespace
}
