package rule

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
)

// switchMapper answers RESTMapping as its current answer says: served, gone
// (a NoMatch), or failing discovery; before, when set, runs first.
type switchMapper struct {
	meta.RESTMapper
	mu     sync.Mutex
	answer string
	before func()
}

func newSwitchMapper() *switchMapper {
	return &switchMapper{RESTMapper: meta.NewDefaultRESTMapper(nil), answer: "served"}
}

func (m *switchMapper) set(answer string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.answer = answer
}

func (m *switchMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	m.mu.Lock()
	answer, before := m.answer, m.before
	m.before = nil
	m.mu.Unlock()
	if before != nil {
		before()
	}
	switch answer {
	case "served":
		return &meta.RESTMapping{}, nil
	case "gone":
		return nil, &meta.NoKindMatchError{GroupKind: gk}
	}
	return nil, errors.New("discovery: the server is currently unable to handle the request")
}

var widget = policyv1alpha1.GroupVersionKind{Group: "nowhere.example", Kind: "Widget"}

// servedLoader is a loader holding one loaded rule on Widgets, found served.
func servedLoader(t *testing.T, m meta.RESTMapper) (*CRLoader, string) {
	t.Helper()
	l := NewCRLoader(nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	l.mapper = m
	key := crKey(KindCluster, "", "widgets")
	c := &servedCheck{kind: KindCluster, name: "widgets", gvks: []policyv1alpha1.GroupVersionKind{widget},
		problems: make([]string, 1), unasked: make([]bool, 1)}
	if l.checkServed(context.Background(), c, true, nil) || c.pending() {
		t.Fatalf("Widgets not found served first: %q", c.notServed())
	}
	l.mu.Lock()
	l.states[key] = LoadState{}
	l.setServedLocked(key, c)
	l.mu.Unlock()
	return l, key
}

func notServedOf(l *CRLoader, key string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.states[key].NotServed
}

// TestServedRuleAskedAgainAfterADiscoveryFailure: a CRD is deleted and
// discovery fails while the loader asks about every rule's kinds again. The
// rule on the deleted kind got no answer: it must be asked again at the next
// resources change, not dropped and left Ready for good.
func TestServedRuleAskedAgainAfterADiscoveryFailure(t *testing.T) {
	ctx := context.Background()
	m := newSwitchMapper()
	l, key := servedLoader(t, m)

	m.set("failing")
	l.ResourcesRemoved()
	l.recheckServed(ctx)
	if got := notServedOf(l, key); len(got) != 0 {
		t.Fatalf("a discovery failure answered as not served: %q", got)
	}
	select {
	case <-l.changed[KindCluster]:
		t.Error("a rule whose answer did not change was notified (status churn)")
	default:
	}

	m.set("gone")
	l.ResourcesChanged()
	l.recheckServed(ctx)
	if got := notServedOf(l, key); len(got) != 1 {
		t.Errorf("the rule on the deleted kind, not answered when discovery failed, was not asked again: not served %q", got)
	}
}

// TestServedAnswerOfTheForgottenMapperNotKept: an ask answered by the mapper
// from before a CRD was deleted, recorded after the loader forgot what it
// found served, must not make the deleted kind served again for every
// later ask.
func TestServedAnswerOfTheForgottenMapperNotKept(t *testing.T) {
	ctx := context.Background()
	m := newSwitchMapper()
	l, key := servedLoader(t, m)
	l.mu.Lock()
	clear(l.served)
	l.mu.Unlock()

	// A reload asks about Widgets while the old mapper still serves them;
	// its answer is recorded only after the CRD is deleted and every rule
	// was asked about again.
	asked, release := make(chan struct{}), make(chan struct{})
	m.mu.Lock()
	m.before = func() { close(asked); <-release }
	m.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.askServed(ctx, widget, true)
	}()
	<-asked
	m.set("gone")
	l.ResourcesRemoved()
	l.recheckServed(ctx)
	if got := notServedOf(l, key); len(got) != 1 {
		t.Fatalf("the rule on the deleted kind: not served %q, want it said", got)
	}
	close(release)
	<-done

	l.ResourcesChanged()
	l.recheckServed(ctx)
	if got := notServedOf(l, key); len(got) != 1 {
		t.Errorf("an answer of the forgotten mapper made the deleted kind served again: not served %q", got)
	}
}

// countingMapper says no kind is served and counts the asks.
type countingMapper struct {
	meta.RESTMapper
	asks atomic.Int32
}

func (m *countingMapper) RESTMapping(gk schema.GroupKind, _ ...string) (*meta.RESTMapping, error) {
	m.asks.Add(1)
	return nil, &meta.NoKindMatchError{GroupKind: gk}
}

// TestRecheckAsksEachKindOnce: a tenant's many rules on one kind the API
// server does not serve cost one ask of discovery (one token of the
// loader's limiter) per recheck, not one per rule, and each rule still
// gets its own answer, naming its own field.
func TestRecheckAsksEachKindOnce(t *testing.T) {
	m := &countingMapper{RESTMapper: meta.NewDefaultRESTMapper(nil)}
	l := NewCRLoader(nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	l.mapper = m
	const rules = 30
	other := policyv1alpha1.GroupVersionKind{Group: "nowhere.example", Kind: "Gadget"}
	for i := range rules {
		key := crKey(KindNamespaced, "tenant", fmt.Sprint("r", i))
		c := &servedCheck{kind: KindNamespaced, namespace: "tenant", name: fmt.Sprint("r", i),
			gvks: []policyv1alpha1.GroupVersionKind{other, widget}, problems: make([]string, 2), unasked: []bool{true, true}}
		l.mu.Lock()
		l.states[key] = LoadState{}
		l.setServedLocked(key, c)
		l.mu.Unlock()
	}
	l.recheckServed(context.Background())
	if n := m.asks.Load(); n != 2 {
		t.Fatalf("%d asks of the mapper for %d rules on two kinds, want 2", n, rules)
	}
	got := notServedOf(l, crKey(KindNamespaced, "tenant", "r7"))
	if len(got) != 2 || !strings.HasPrefix(got[0], "match.gvk[0]: Gadget.nowhere.example is not served") ||
		!strings.HasPrefix(got[1], "match.gvk[1]: Widget.nowhere.example is not served") {
		t.Fatalf("a rule's answers: %q", got)
	}
}
