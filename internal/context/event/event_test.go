package event_test

import (
	"encoding/json"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/context/event"
)

// TestEventsAreBounded: whatever a requester puts in a request (a user
// agent, object names) or a workload in Falco's output fields reaches a
// rule cut to its bound, and the request's and response's bodies not at
// all.
func TestEventsAreBounded(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	groups := make([]string, 1000)
	for i := range groups {
		groups[i] = "g"
	}
	ev := map[string]any{
		"kind": "Event", "apiVersion": "audit.k8s.io/v1", "stage": "ResponseComplete", "verb": "get",
		"userAgent": huge, "user": map[string]any{"username": huge, "groups": groups, "extra": map[string]any{"k": []string{huge}}},
		"objectRef":      map[string]any{"resource": "secrets", "namespace": "prod", "name": huge},
		"requestObject":  map[string]any{"data": map[string]any{"password": "aHVudGVyMg=="}},
		"responseObject": map[string]any{"data": map[string]any{"password": "aHVudGVyMg=="}},
	}
	list, _ := json.Marshal(map[string]any{"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": []any{ev}})
	evs, err := event.DecodeList(list, 10)
	if err != nil {
		t.Fatal(err)
	}
	env := event.Env(&evs[0], event.Classify(&evs[0]), nil)
	b, _ := json.Marshal(env)
	if strings.Contains(string(b), "aHVudGVyMg") {
		t.Fatal("a request or response body reached the event context")
	}
	if len(b) > 16<<10 {
		t.Fatalf("the event context is %d bytes", len(b))
	}
	if got := len(evs[0].User.Groups); got != event.MaxGroups {
		t.Errorf("groups = %d, want %d", got, event.MaxGroups)
	}
	if !slices.Equal(event.Classify(&evs[0]), []string{"secret-read", "any"}) {
		t.Errorf("classes = %v", event.Classify(&evs[0]))
	}
	fields := map[string]any{}
	for i := range 500 {
		fields[strings.Repeat("f", i%50+1)+string(rune(0x4e00+i))] = map[string]any{"nested": huge[:4096]}
	}
	alert, _ := json.Marshal(map[string]any{"rule": "r", "priority": "Warning", "output": huge, "output_fields": fields})
	fe, err := event.DecodeFalco(alert)
	if err != nil {
		t.Fatal(err)
	}
	if len(fe.Falco.OutputFields) != event.MaxOutputFields || len(fe.Falco.Output) > 4096 {
		t.Errorf("falco output fields %d, output %d bytes", len(fe.Falco.OutputFields), len(fe.Falco.Output))
	}
}

// TestDecodeRefusesOtherKinds: the endpoint takes audit.k8s.io/v1
// EventLists and Falco alerts with a known priority, nothing else.
func TestDecodeRefusesOtherKinds(t *testing.T) {
	for _, body := range []string{`{"kind":"EventList","apiVersion":"audit.k8s.io/v1beta1","items":[]}`, `{"kind":"PodList","apiVersion":"v1"}`, `[`} {
		if _, err := event.DecodeList([]byte(body), 10); err == nil {
			t.Errorf("%s decoded", body)
		}
	}
	if _, err := event.DecodeFalco([]byte(`{"rule":"r","priority":"Urgent"}`)); err == nil {
		t.Error("a Falco alert of an unknown priority decoded")
	}
}

// TestDecodeRecordedTakesAuditEventsAndFalcoAlerts: a recorded log's line
// is an audit event or a Falco alert; anything else, including an audit
// event of another version that happens to name a rule, keeps the audit
// error that says what was expected.
func TestDecodeRecordedTakesAuditEventsAndFalcoAlerts(t *testing.T) {
	ev, err := event.DecodeRecorded([]byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","verb":"get","stage":"ResponseComplete"}`))
	if err != nil || ev.Falco != nil || ev.Verb != "get" {
		t.Errorf("audit event: %+v, %v", ev, err)
	}
	ev, err = event.DecodeRecorded([]byte(`{"rule":"Terminal shell in container","priority":"Notice","output_fields":{"k8s.ns.name":"prod","k8s.pod.name":"web-0"}}`))
	if err != nil || ev.Falco == nil || ev.ObjectRef == nil || ev.ObjectRef.Name != "web-0" {
		t.Errorf("Falco alert: %+v, %v", ev, err)
	}
	for _, line := range []string{
		`{"kind":"Event","apiVersion":"audit.k8s.io/v1beta1","rule":"r","priority":"Notice"}`,
		`{"kind":"Pod","apiVersion":"v1"}`,
		`{"rule":"r"}`,
		`not json`,
	} {
		if _, err := event.DecodeRecorded([]byte(line)); err == nil || !strings.Contains(err.Error(), "decode audit event") {
			t.Errorf("%s: %v, want the audit event's error", line, err)
		}
	}
	if _, err := event.DecodeRecorded([]byte(`{"rule":"r","priority":"Urgent"}`)); err == nil || !strings.Contains(err.Error(), "priority") {
		t.Errorf("a Falco alert of an unknown priority: %v, want its own error", err)
	}
}

// TestDecodeListRefusesABatchBeforeBuildingIt: a body of empty items
// ({},{},...) took, decoded whole, about 550 MiB for 1 MiB sent before the
// batch limit could refuse it, and the endpoint takes 16 MiB bodies. Items
// are counted as they are decoded: past the limit, the rest is never built.
func TestDecodeListRefusesABatchBeforeBuildingIt(t *testing.T) {
	body := []byte(`{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{}` + strings.Repeat(`,{}`, 1<<20/3) + `]}`)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := event.DecodeList(body, 5000)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "more than 5000 events") {
		t.Fatalf("a batch of %d events: %v, want refused", 1<<20/3, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("refusing a 1 MiB batch allocated %d MiB, want under 32", alloc>>20)
	}
	evs, err := event.DecodeList([]byte(`{"items":[{"kind":"Event","apiVersion":"audit.k8s.io/v1","verb":"get"}],"apiVersion":"audit.k8s.io/v1","kind":"EventList","extra":{"x":[1]}}`), 5000)
	if err != nil || len(evs) != 1 || evs[0].Verb != "get" {
		t.Errorf("a batch with its kind after its items: %v %v", evs, err)
	}
}

// TestServiceAccountUser: only system:serviceaccount:NS:NAME is a
// ServiceAccount.
func TestServiceAccountUser(t *testing.T) {
	for name, want := range map[string]bool{
		"system:serviceaccount:ci:deployer": true, "system:serviceaccount:ci": false, "system:serviceaccount::x": false,
		"system:serviceaccount:ci:a:b": false, "alice": false, "system:serviceaccounts:ci": false,
	} {
		u := event.UserInfo{Username: name}
		if _, _, ok := u.ServiceAccount(); ok != want {
			t.Errorf("%s: %v, want %v", name, ok, want)
		}
	}
}
