package manager

import (
	"context"
	"net/http"
	"time"
)

// drainAfter returns a context that ends drain after ctx does, and a
// channel closed when ctx ends. Between the two, Portal keeps serving but
// closes each webhook connection after its response (drainingHandler).
// The API server pools its HTTP/1.1 connections to a webhook by the
// Service's host name, not by endpoint: it keeps sending requests on a
// connection to a replica that is stopping, and a listener that closes
// under it fails them. Asked to close, it dials again and reaches a
// replica that stays. drain <= 0 stops at once, as before.
func drainAfter(ctx context.Context, drain time.Duration) (context.Context, <-chan struct{}, context.CancelFunc) {
	if drain <= 0 {
		return ctx, nil, func() {} // a nil channel: never draining
	}
	draining := make(chan struct{})
	run, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-ctx.Done():
		case <-run.Done():
			return
		}
		close(draining)
		t := time.NewTimer(drain)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-run.Done():
		}
	}()
	return run, draining, cancel
}

// drainingHandler answers with "Connection: close" once draining is
// closed, so the client stops reusing the connection.
func drainingHandler(next http.Handler, draining <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-draining:
			w.Header().Set("Connection", "close")
		default:
		}
		next.ServeHTTP(w, r)
	})
}
