package proxy

import (
	"context"
	"log/slog"
)

// logAttrsKey carries the log attributes of one request: the policy that
// covers its route. One compiled proxy serves every policy with the same
// rule set, exclusions and security logs (the Router shares it to save
// memory), so the policy cannot live in the proxy's logger; it travels
// with the request instead.
type logAttrsKey struct{}

// withLogAttrs returns ctx carrying attrs, which the Proxy adds to every
// log line of the request, matched-rule lines included.
func withLogAttrs(ctx context.Context, attrs []slog.Attr) context.Context {
	if len(attrs) == 0 {
		return ctx
	}
	return context.WithValue(ctx, logAttrsKey{}, attrs)
}

func logAttrs(ctx context.Context) []slog.Attr {
	a, _ := ctx.Value(logAttrsKey{}).([]slog.Attr)
	return a
}

// reqLog is the proxy's logger with the request's attributes.
func (p *Proxy) reqLog(ctx context.Context) *slog.Logger {
	a := logAttrs(ctx)
	if len(a) == 0 {
		return p.log
	}
	return slog.New(p.log.Handler().WithAttrs(a))
}

// trackTx remembers the request's attributes under the transaction id for
// the matched-rule callback, which Coraza calls without the request's
// context; the returned func forgets them.
func (p *Proxy) trackTx(ctx context.Context, txID string) func() {
	a := logAttrs(ctx)
	if len(a) == 0 {
		return func() {}
	}
	p.txAttrs.Store(txID, a)
	return func() { p.txAttrs.Delete(txID) }
}

// txLogAttrs returns the attributes trackTx remembered for txID.
func (p *Proxy) txLogAttrs(txID string) []slog.Attr {
	a, _ := p.txAttrs.Load(txID)
	attrs, _ := a.([]slog.Attr)
	return attrs
}
