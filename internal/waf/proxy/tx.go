package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/corazawaf/coraza/v3/types"
)

// The transaction phases follow Coraza's own net/http middleware
// (github.com/corazawaf/coraza/v3/http): connection, URI, headers and body
// of the request before the upstream sees it, then response headers and
// body before the client does. That middleware binds one WAF for its
// lifetime, answers an interruption with a bare status and reads the
// response through a ResponseWriter interceptor; the proxy instead picks the
// WAF per request (hot swap), answers with a body, counts blocks by rule,
// and inspects the response in ReverseProxy's ModifyResponse hook, where
// the whole upstream response is at hand before anything is written.

// txKey carries the request's transaction to the response hook.
type txKey struct{}

// processRequest runs the request phases (1 and 2). It reads the body
// into the transaction only when the rules ask for it, up to the body
// limit, and leaves r.Body holding the same bytes for the upstream.
func processRequest(tx types.Transaction, r *http.Request, bufs *buffers) (*types.Interruption, error) {
	client, cport := splitHostPort(r.RemoteAddr)
	server, sport := localAddr(r)
	tx.ProcessConnection(client, cport, server, sport)
	uri := r.RequestURI
	if uri == "" {
		uri = r.URL.RequestURI()
	}
	tx.ProcessURI(uri, r.Method, r.Proto)
	for k, vs := range r.Header {
		for _, v := range vs {
			tx.AddRequestHeader(k, v)
		}
	}
	// net/http moves Host and Transfer-Encoding out of the header map;
	// rules look for them (CRS 920280, 920171 and friends).
	switch {
	case r.Host != "":
		tx.AddRequestHeader("Host", r.Host)
		tx.SetServerName(hostOnly(r.Host))
	case r.ProtoAtLeast(1, 1):
		// net/http refuses an HTTP/1.1 request without Host, so this one
		// sent an empty Host (CRS 920290). Under HTTP/1.0 an empty Host
		// and none look the same.
		tx.AddRequestHeader("Host", "")
	}
	for _, te := range r.TransferEncoding {
		tx.AddRequestHeader("Transfer-Encoding", te)
	}
	if it := tx.ProcessRequestHeaders(); it != nil {
		return it, nil
	}
	if tx.IsRequestBodyAccessible() && r.Body != nil && r.Body != http.NoBody {
		it, rest, err := bufs.feed(tx.WriteRequestBody, r.Body, 0)
		if err != nil {
			return nil, fmt.Errorf("request body: %w", err)
		}
		if it != nil {
			return it, nil
		}
		buffered, err := tx.RequestBodyReader()
		if err != nil {
			return nil, fmt.Errorf("request body: %w", err)
		}
		if rest == nil {
			// The whole body is in the transaction's buffer, so the
			// upstream transport can send it again: it retries a request
			// on a new connection when a kept-alive one turns out broken
			// before a byte was written, but only if it can replay the
			// body. Without this a POST got 502 there, where a GET is
			// retried.
			r.Body = readCloser{Reader: buffered, Closer: r.Body}
			r.GetBody = func() (io.ReadCloser, error) {
				again, err := tx.RequestBodyReader()
				if err != nil {
					return nil, err
				}
				return io.NopCloser(again), nil
			}
		} else {
			// Beyond the limit (ProcessPartial) the rest streams
			// uninspected.
			r.Body = readCloser{Reader: io.MultiReader(buffered, rest), Closer: r.Body}
		}
	}
	return tx.ProcessRequestBody()
}

func hostOnly(hostport string) string {
	host, _ := splitHostPort(hostport)
	return host
}

type readCloser struct {
	io.Reader
	io.Closer
}

// interruptedError is how inspectResponse hands an interruption to the
// ReverseProxy's ErrorHandler.
type interruptedError struct {
	it   *types.Interruption
	txID string
}

func (e *interruptedError) Error() string {
	return fmt.Sprintf("interrupted by rule %d", e.it.RuleID)
}

// inspectResponse is the ReverseProxy's ModifyResponse: it runs the
// response phases (3 and 4) on the upstream's answer before any of it
// reaches the client. The body is buffered only when the rules inspect it
// and its content type is one of SecResponseBodyMimeType, and never more of
// it than MaxResponseBodyBytes: the rest streams to the client uninspected.
func (p *Proxy) inspectResponse(resp *http.Response) error {
	tx, ok := resp.Request.Context().Value(txKey{}).(types.Transaction)
	if !ok {
		return nil
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			tx.AddResponseHeader(k, v)
		}
	}
	if it := tx.ProcessResponseHeaders(resp.StatusCode, resp.Proto); it != nil {
		return &interruptedError{it: it, txID: tx.ID()}
	}
	if tx.IsResponseBodyAccessible() && tx.IsResponseBodyProcessable() {
		it, rest, err := p.bufs.feed(tx.WriteResponseBody, resp.Body, p.maxResponseBody())
		if err != nil {
			return fmt.Errorf("read upstream response body: %w", err)
		}
		if it != nil {
			return &interruptedError{it: it, txID: tx.ID()}
		}
		buffered, err := tx.ResponseBodyReader()
		if err != nil {
			return fmt.Errorf("upstream response body: %w", err)
		}
		if rest == nil {
			rest = http.NoBody
		}
		resp.Body = readCloser{Reader: io.MultiReader(buffered, rest), Closer: resp.Body}
	}
	// Phase 4 runs even without a body to inspect (outbound anomaly scoring).
	it, err := tx.ProcessResponseBody()
	if err != nil {
		return fmt.Errorf("inspect upstream response body: %w", err)
	}
	if it != nil {
		return &interruptedError{it: it, txID: tx.ID()}
	}
	return nil
}

// logMatch is the WAF's error callback: one JSON line per matched rule
// that has the log action. The rule's fields sit in a "rule" group, so the
// line holds "rule":{"id":N,...}, the shape go-ftw and most log pipelines
// recognise.
func (p *Proxy) logMatch(mr types.MatchedRule) {
	rule := mr.Rule()
	attrs := append([]slog.Attr{
		slog.Group("rule",
			slog.Int("id", rule.ID()),
			slog.String("msg", mr.Message()),
			slog.String("data", mr.Data()),
			slog.String("severity", rule.Severity().String()),
			slog.Int("phase", int(rule.Phase())),
		),
		slog.String("client", mr.ClientIPAddress()),
		slog.String("uri", mr.URI()),
		slog.String("tx", mr.TransactionID()),
	}, p.txLogAttrs(mr.TransactionID())...)
	// Coraza calls back without the request's context; the request's
	// attributes (its policy) come by transaction id.
	p.log.LogAttrs(context.Background(), slog.LevelWarn, MatchMessage, attrs...)
}
