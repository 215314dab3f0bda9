package manager

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestDrainClosesConnectionsThenStops: after the parent context ends, the
// webhook still answers, but asks the client to close the connection;
// only after the drain period does the run context end.
func TestDrainClosesConnectionsThenStops(t *testing.T) {
	parent, stop := context.WithCancel(context.Background())
	// Long enough that a loaded machine does not end the drain between
	// seeing it start and checking the run context.
	run, draining, cancel := drainAfter(parent, 2*time.Second)
	defer cancel()
	srv := httptest.NewServer(drainingHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	}), draining))
	defer srv.Close()
	get := func() *http.Response {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := get(); r.Close {
		t.Fatal("the connection is closed before any stop was asked")
	}
	stop()
	select {
	case <-draining:
	case <-time.After(5 * time.Second):
		t.Fatal("not draining after the stop")
	}
	if run.Err() != nil {
		t.Fatal("stopped at once instead of draining")
	}
	if r := get(); !r.Close {
		t.Error("a response while draining keeps the connection open: the client would reuse it as the listener closes")
	}
	select {
	case <-run.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("still running after the drain period")
	}
}

// TestNoDrainStopsAtOnce: without a drain period nothing changes.
func TestNoDrainStopsAtOnce(t *testing.T) {
	parent, stop := context.WithCancel(context.Background())
	run, draining, cancel := drainAfter(parent, 0)
	defer cancel()
	rec := httptest.NewRecorder()
	drainingHandler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), draining).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Header().Get("Connection") == "close" {
		t.Error("Connection: close without a drain")
	}
	stop()
	if run.Err() == nil {
		t.Error("the run context outlived its parent without a drain period")
	}
}
