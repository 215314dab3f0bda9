package proxy

import (
	"net/http"
	"time"
)

// ServerOptions are the limits of the listener in front of a Proxy.
type ServerOptions struct {
	// ReadHeaderTimeout bounds reading the request line and headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading the whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds the time from the end of the request headers to
	// the end of the answer: WAF, upstream and response inspection.
	WriteTimeout time.Duration
	// IdleTimeout bounds how long a keep-alive connection waits for the
	// next request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers.
	MaxHeaderBytes int
}

// DefaultServerOptions are the limits `portal waf-proxy` starts from.
func DefaultServerOptions() ServerOptions {
	return ServerOptions{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      120 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// NewServer returns an http.Server for h with these limits; set Addr or
// call Serve with a listener.
func NewServer(h http.Handler, o ServerOptions) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		ReadTimeout:       o.ReadTimeout,
		WriteTimeout:      o.WriteTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
	}
}
