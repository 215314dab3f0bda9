package cache

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestClient(t *testing.T) {
	_, _, srv := testServer(t)
	ctx := context.Background()
	cl, err := NewClient(srv.URL+"/", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Entry(ctx, "team-a", "crs"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("without a token: %v, want 401", err)
	}
	cl.Token = func() (string, error) { return "team-a", nil }
	e, err := cl.Entry(ctx, "team-a", "crs")
	if err != nil || string(e.DataFiles["words.txt"]) != "evil\n" || !e.Timestamp.Equal(t0) {
		t.Fatalf("entry %+v %v", e, err)
	}
	if _, err := cl.Entry(ctx, "team-a", "bad/name"); err == nil {
		t.Fatal("a malformed name reached the server")
	}
	for _, u := range []string{"", "ftp://x", "http://", "::"} {
		if _, err := NewClient(u, nil); err == nil {
			t.Errorf("NewClient(%q) accepted", u)
		}
	}
	// Errors other than 404 carry the server's message; bodies are bounded.
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/latest") {
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"uuid":"` + strings.Repeat("x", 100) + `"}`))
	}))
	defer broken.Close()
	cl, _ = NewClient(broken.URL, broken.Client())
	if _, err := cl.Latest(ctx, "a", "b"); err == nil || !strings.Contains(err.Error(), "overloaded") {
		t.Fatalf("503: %v", err)
	}
	cl.MaxResponseBytes = 50
	if _, err := cl.Entry(ctx, "a", "b"); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized: %v", err)
	}
}
