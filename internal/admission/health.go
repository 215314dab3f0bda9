package admission

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// HealthOptions tune when the webhook reports itself not ready.
type HealthOptions struct {
	// Window is how many recent requests are remembered (M). Default 20.
	Window int
	// MaxFailures is how many handler failures among the last Window requests
	// are tolerated (N): one more and the webhook is not ready. Default 5
	// (and at most Window-1).
	MaxFailures int
	// MaxAge forgets failures older than this, so a replica that readiness
	// took out of the Service (and so receives no requests to push failures
	// out of the window) becomes ready again and is retried. Default 1m.
	MaxAge time.Duration
}

func (o *HealthOptions) defaults() {
	if o.Window <= 0 {
		o.Window = 20
	}
	if o.MaxFailures <= 0 {
		o.MaxFailures = 5
	}
	o.MaxFailures = min(o.MaxFailures, o.Window-1)
	if o.MaxAge <= 0 {
		o.MaxAge = time.Minute
	}
}

// health decides readiness: the rule index has completed its initial load,
// and handler failures (recovered panics and internal errors, never denials)
// do not persist.
type health struct {
	loaded <-chan struct{}
	opts   HealthOptions
	now    func() time.Time

	mu sync.Mutex
	// failures holds the time of each of the last Window requests that
	// failed, and the zero time for each that did not.
	failures []time.Time
	next     int
}

func newHealth(loaded <-chan struct{}, opts HealthOptions) *health {
	opts.defaults()
	return &health{loaded: loaded, opts: opts, now: time.Now, failures: make([]time.Time, opts.Window)}
}

// rulesLoaded reports whether the initial rule load is complete.
func (h *health) rulesLoaded() bool {
	if h.loaded == nil {
		return true
	}
	select {
	case <-h.loaded:
		return true
	default:
		return false
	}
}

// record remembers the outcome of one request.
func (h *health) record(failed bool) {
	var t time.Time
	if failed {
		t = h.now()
	}
	h.mu.Lock()
	h.failures[h.next] = t
	h.next = (h.next + 1) % len(h.failures)
	h.mu.Unlock()
}

// recentFailures counts the failures among the remembered requests that are
// younger than MaxAge.
func (h *health) recentFailures() int {
	cutoff := h.now().Add(-h.opts.MaxAge)
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, t := range h.failures {
		if !t.IsZero() && t.After(cutoff) {
			n++
		}
	}
	return n
}

// check is a healthz.Checker.
func (h *health) check(*http.Request) error {
	if !h.rulesLoaded() {
		return fmt.Errorf("admission: rules not loaded yet")
	}
	if n := h.recentFailures(); n > h.opts.MaxFailures {
		return fmt.Errorf("admission: %d of the last %d requests failed inside the handler (more than %d within %s); see the logs for \"admission handler failed\"",
			n, h.opts.Window, h.opts.MaxFailures, h.opts.MaxAge)
	}
	return nil
}
