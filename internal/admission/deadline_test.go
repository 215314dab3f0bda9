package admission_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
)

// deadlineProbe is an Evaluator that records its context's deadline and,
// when block is set, runs until that context ends, as a rule that never
// finishes would.
type deadlineProbe struct {
	block    bool
	mu       sync.Mutex
	deadline time.Time
	set      bool
}

func (p *deadlineProbe) Evaluate(ctx context.Context, _ *unstructured.Unstructured, _ engine.Options) ([]core.Result, error) {
	d, ok := ctx.Deadline()
	p.mu.Lock()
	p.deadline, p.set = d, ok
	p.mu.Unlock()
	if !ok {
		return nil, errors.New("no deadline")
	}
	if p.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, nil
}

// TestRequestDeadline: every evaluation has a deadline. A request without
// ?timeout= (the API server always sends one; a client posting to the
// webhook port need not) gets the API server's default webhook timeout, so
// an evaluation that only its context can stop ends; a ?timeout= above the
// API server's maximum is cut to it.
func TestRequestDeadline(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		def         time.Duration // 0: the webhook's own default
		block       bool
		max         time.Duration // the deadline is at most this after the answer
	}{
		{"no timeout, blocking rule", "", 50 * time.Millisecond, true, 50 * time.Millisecond},
		{"no timeout", "", 0, false, admission.DefaultRequestTimeout},
		{"unparsable timeout", "?timeout=soon", 0, false, admission.DefaultRequestTimeout},
		{"timeout above the maximum", "?timeout=10m", 0, false, admission.MaxRequestTimeout},
		{"timeout as sent", "?timeout=5s", 0, false, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probe := &deadlineProbe{block: tc.block}
			wh, err := admission.New(admission.Options{Evaluator: probe, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			if tc.def > 0 {
				admission.SetDefaultTimeout(wh, tc.def)
			}
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodPost, admission.Path+tc.query, strings.NewReader(review("d", "CREATE", "default", false)))
			req.Header.Set("Content-Type", "application/json")
			wh.ServeHTTP(rec, req)
			answered := time.Now()
			probe.mu.Lock()
			defer probe.mu.Unlock()
			if !probe.set {
				t.Fatalf("the evaluation had no deadline (HTTP %d: %s)", rec.Code, rec.Body)
			}
			if limit := answered.Add(tc.max); probe.deadline.After(limit) {
				t.Fatalf("deadline %v is later than %v after the answer", probe.deadline, tc.max)
			}
			if tc.block && !strings.Contains(rec.Body.String(), "context deadline exceeded") {
				t.Fatalf("the blocked evaluation did not end with its deadline: %s", rec.Body)
			}
		})
	}
}
