package runtime_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/runtime"
)

// countingReader counts the resolutions a source asks for: each one of a
// resource the API server does not serve makes the real RESTMapper read the
// API server's discovery again.
type countingReader struct {
	clustercache.Reader
	asks atomic.Int64
}

func (c *countingReader) Resolve(resource string) (clustercache.Resource, error) {
	c.asks.Add(1)
	return c.Reader.Resolve(resource)
}

// TestUnknownResourcesAreAskedAtABoundedRate: the API server audits
// requests for resources that do not exist (a 404 is audited), so any API
// user can name a new one per request. Portal remembers a resource it was
// told is not served, and asks about new names at a bounded rate, so such a
// stream cannot turn into a discovery read per event.
func TestUnknownResourcesAreAskedAtABoundedRate(t *testing.T) {
	targets := &countingReader{Reader: (&clustercache.StaticBuilder{}).Build()}
	h := newHarness(t, execRules, nil, runtime.Options{Targets: targets})
	for i := range 5000 {
		ev := auditEvent(fmt.Sprint("id-", i), "mallory", "get", fmt.Sprintf("r%d", i), "", "prod", "x")
		ev.ObjectRef.APIGroup = "nowhere.example"
		h.src.Process(t.Context(), runtime.InputWebhook, &ev)
	}
	if n := targets.asks.Load(); n > 100 {
		t.Errorf("5,000 events naming new unknown resources at one instant asked the mapper %d times, want at most the burst of 100", n)
	}
	before := targets.asks.Load()
	for i := range 50 {
		ev := auditEvent(fmt.Sprint("again-", i), "mallory", "get", "r0", "", "prod", "x")
		ev.ObjectRef.APIGroup = "nowhere.example"
		h.src.Process(t.Context(), runtime.InputWebhook, &ev)
	}
	if n := targets.asks.Load() - before; n != 0 {
		t.Errorf("a resource known not to be served was asked about %d more times", n)
	}
}
