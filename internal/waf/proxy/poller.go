package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// MinPollInterval is the shortest interval Poller accepts.
const MinPollInterval = time.Second

// DefaultPollInterval is the interval of `portal waf-proxy --poll-interval`.
const DefaultPollInterval = 15 * time.Second

// pollTimeout bounds one poll (the /latest request and, on a new revision,
// the entry).
const pollTimeout = 30 * time.Second

// Poller keeps a Proxy on the latest revision of one RuleSet in Portal's
// rule set cache: it asks GET /rules/{namespace}/{name}/latest every
// Interval and, when the uuid differs from the one in force, fetches the
// entry and loads it. A revision that does not compile is not tried again
// until the uuid changes; a failed fetch is retried at the next poll.
type Poller struct {
	// Client reads the cache server. Required.
	Client *cache.Client
	// Namespace and Name name the RuleSet. Required.
	Namespace, Name string
	// Interval is the time between polls (at least MinPollInterval).
	Interval time.Duration
	// Target is the proxy to load revisions into. Required.
	Target *Proxy
	// Logger receives the poller's logs (slog.Default() when nil).
	Logger *slog.Logger
	// Metrics, when set, counts failed reloads.
	Metrics *Metrics

	// rejected is the uuid of the last revision that failed to compile.
	rejected string
}

// Run polls at once and then every Interval until ctx ends; it returns
// nil then. Errors of single polls are logged and counted, not returned.
func (p *Poller) Run(ctx context.Context) error {
	if err := p.validate(); err != nil {
		return err
	}
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	for {
		if _, err := p.Poll(ctx); err != nil && ctx.Err() == nil {
			p.logger().Warn("rule set poll failed; the rule set in force stays", "ruleset", p.key(), "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (p *Poller) validate() error {
	switch {
	case p.Client == nil || p.Target == nil:
		return errors.New("waf-proxy poller: Client and Target are required")
	case p.Interval < MinPollInterval:
		return fmt.Errorf("waf-proxy poller: poll interval %s is below the minimum of %s", p.Interval, MinPollInterval)
	}
	return nil
}

func (p *Poller) logger() *slog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return slog.Default()
}

func (p *Poller) key() string { return cache.Key(p.Namespace, p.Name) }

// Poll checks the cache once and loads a new revision if there is one. It
// reports whether the revision in force changed. The entry must have the
// sha256 the /latest answer announced; when it does not, nothing is
// compiled and the revision in force stays.
func (p *Poller) Poll(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	var entry cache.Entry
	// A second try covers a revision stored between the two requests,
	// which changes the body under the announced digest.
	for try := 0; ; try++ {
		latest, err := p.Client.Latest(ctx, p.Namespace, p.Name)
		if err == nil && latest.UUID == "" {
			err = errors.New("rule set cache: the latest revision has no uuid")
		}
		if err != nil {
			p.Metrics.failed(FailureFetch)
			return false, err
		}
		if p.unchanged(latest.UUID) {
			return false, nil
		}
		entry, err = p.Client.EntryWithDigest(ctx, p.Namespace, p.Name, latest.SHA256)
		if errors.Is(err, cache.ErrDigestMismatch) && try == 0 {
			continue
		}
		if err == nil && entry.UUID != latest.UUID {
			err = fmt.Errorf("rule set cache: the entry is revision %q, /latest announced %q", entry.UUID, latest.UUID)
		}
		switch {
		case errors.Is(err, cache.ErrDigestMismatch):
			p.Metrics.failed(FailureDigest)
			return false, err
		case err != nil:
			p.Metrics.failed(FailureFetch)
			return false, err
		}
		break
	}
	if p.unchanged(entry.UUID) {
		return false, nil
	}
	start := time.Now()
	rev := Revision{UUID: entry.UUID, Timestamp: entry.Timestamp, Bundle: ruleset.Bundle{Rules: entry.Rules, DataFiles: entry.DataFiles}}
	if err := p.Target.Load(rev); err != nil {
		p.rejected = entry.UUID
		p.Metrics.failed(FailureCompile)
		return false, err
	}
	p.rejected = ""
	p.logger().Info("rule set revision loaded", "ruleset", p.key(), "uuid", entry.UUID,
		"timestamp", entry.Timestamp, "compile", time.Since(start).Round(time.Millisecond).String())
	return true, nil
}

// unchanged reports whether uuid is in force or already failed to compile.
func (p *Poller) unchanged(uuid string) bool {
	cur, ok := p.Target.Current()
	return (ok && cur.UUID == uuid) || uuid == p.rejected
}

// ParseRuleSet splits "namespace/name" as --ruleset takes it. The
// namespace must be a DNS label and the name a DNS subdomain, as in
// Kubernetes.
func ParseRuleSet(s string) (namespace, name string, err error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("rule set %q: want namespace/name", s)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "", "", fmt.Errorf("rule set %q: namespace: %s", s, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", "", fmt.Errorf("rule set %q: name: %s", s, strings.Join(errs, "; "))
	}
	return ns, name, nil
}
