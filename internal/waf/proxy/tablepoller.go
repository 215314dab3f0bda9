package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// TablePoller keeps a Router on the latest route table of one Gateway in
// Portal's cache and on the rule set revisions that table runs: it asks
// GET /tables/{namespace}/{gateway}/latest every Interval and, when the
// table changed, fetches it and every rule set revision it needs that is
// not loaded yet, compiles each with its route's exclusions, and swaps the
// whole table in at once. Proxies no longer used are closed once their
// requests finish.
type TablePoller struct {
	// Client reads the cache server. Required.
	Client *cache.Client
	// Namespace and Gateway name the Gateway. Required.
	Namespace, Gateway string
	// Interval is the time between polls (at least MinPollInterval).
	Interval time.Duration
	// Target is the router to load tables into. Required.
	Target *Router
	// Logger receives the poller's logs (slog.Default() when nil).
	Logger *slog.Logger
	// Metrics, when set, counts failed reloads.
	Metrics *Metrics

	// applied is the uuid of the table fully in force; variants the
	// proxies loaded, by variant key.
	applied  string
	variants map[string]*Proxy
}

// Run polls at once and then every Interval until ctx ends.
func (p *TablePoller) Run(ctx context.Context) error {
	switch {
	case p.Client == nil || p.Target == nil || p.Target.NewProxy == nil:
		return errors.New("waf-proxy table poller: Client, Target and Target.NewProxy are required")
	case p.Interval < MinPollInterval:
		return fmt.Errorf("waf-proxy table poller: poll interval %s is below the minimum of %s", p.Interval, MinPollInterval)
	}
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	for {
		if _, err := p.Poll(ctx); err != nil && ctx.Err() == nil {
			p.logger().Warn("route table poll failed; the table in force stays", "gateway", cache.Key(p.Namespace, p.Gateway), "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (p *TablePoller) logger() *slog.Logger {
	if p.Logger != nil {
		return p.Logger
	}
	return slog.Default()
}

// Poll checks the cache once and loads a new table if there is one; it
// reports whether the table in force changed.
func (p *TablePoller) Poll(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	p.Target.init()
	latest, err := p.Client.TableLatest(ctx, p.Namespace, p.Gateway)
	if err != nil {
		p.Metrics.failed(FailureFetch)
		return false, err
	}
	if latest.UUID == p.applied {
		return false, nil
	}
	t, err := p.Client.TableWithDigest(ctx, p.Namespace, p.Gateway, latest.SHA256)
	if err != nil {
		p.Metrics.failed(FailureFetch)
		return false, err
	}
	st, err := compileTable(t)
	if err != nil {
		p.Metrics.failed(FailureCompile)
		return false, err
	}
	st.uuid = latest.UUID
	used := map[string]*Proxy{}
	var transient []error
	for i, pol := range t.Policies {
		rp := routePolicy{failOpen: pol.FailOpen, policy: pol.Policy, unavailable: pol.Unavailable,
			logAttrs: []slog.Attr{slog.String("policy", pol.Policy)}}
		if pol.RuleSet != nil {
			px, err := p.variant(ctx, pol, used)
			var te transientError
			switch {
			case errors.As(err, &te):
				transient = append(transient, err)
				rp.unavailable = err.Error()
			case err != nil:
				rp.unavailable = err.Error()
			}
			rp.proxy = px
		}
		if rp.proxy == nil {
			p.logger().Warn("route policy not runnable: its routes fail closed unless it says failOpen", "policy", pol.Policy,
				"reason", rp.unavailable, "failOpen", pol.FailOpen)
		}
		st.policies[i] = rp
	}
	p.Target.cur.Store(st)
	for key, px := range p.variants {
		if used[key] == nil {
			px.Close()
		}
	}
	p.variants = used
	if len(transient) == 0 {
		p.applied = latest.UUID
	}
	p.logger().Info("route table loaded", "gateway", cache.Key(p.Namespace, p.Gateway), "uuid", latest.UUID,
		"rows", len(st.rows), "policies", len(st.policies), "pending", len(transient))
	return true, errors.Join(transient...)
}

// transientError is a failure the next poll may not have.
type transientError struct{ error }

func (e transientError) Unwrap() error { return e.error }

// variant returns the loaded proxy of a policy, reusing one already loaded
// for the same revision, exclusions and logs, whichever policy loaded it:
// the policy is named per request, not by the proxy.
func (p *TablePoller) variant(ctx context.Context, pol cache.TablePolicy, used map[string]*Proxy) (*Proxy, error) {
	key := variantKey(pol)
	if px := used[key]; px != nil {
		return px, nil
	}
	if px := p.variants[key]; px != nil {
		used[key] = px
		return px, nil
	}
	rs := pol.RuleSet
	extra, err := ExclusionRules(pol.Exclusions)
	if err != nil {
		return nil, err
	}
	latest, err := p.Client.Latest(ctx, rs.Namespace, rs.Name)
	if err != nil {
		p.Metrics.failed(FailureFetch)
		return nil, transientError{fmt.Errorf("rule set %s: %w", cache.Key(rs.Namespace, rs.Name), err)}
	}
	if latest.UUID != rs.UUID {
		return nil, transientError{fmt.Errorf("rule set %s: the cache serves revision %s, the table wants %s", cache.Key(rs.Namespace, rs.Name), latest.UUID, rs.UUID)}
	}
	entry, err := p.Client.EntryWithDigest(ctx, rs.Namespace, rs.Name, latest.SHA256)
	if err == nil && entry.UUID != rs.UUID {
		err = fmt.Errorf("the entry is revision %s", entry.UUID)
	}
	if err != nil {
		p.Metrics.failed(FailureFetch)
		return nil, transientError{fmt.Errorf("rule set %s: %w", cache.Key(rs.Namespace, rs.Name), err)}
	}
	// No policy here: policies with the same key share this proxy, and
	// the Router names the policy of each request (routePolicy.logAttrs).
	log := p.logger().With("ruleset", cache.Key(rs.Namespace, rs.Name))
	if p.Target.SecurityLogs != nil && len(pol.SecurityLogs) > 0 {
		if l, err := p.Target.SecurityLogs(pol.SecurityLogs); err != nil {
			log.Warn("security log destinations not opened; matches go to the proxy's log", "policy", pol.Policy, "error", err)
		} else {
			log = l.With("ruleset", cache.Key(rs.Namespace, rs.Name))
		}
	}
	px := p.Target.NewProxy(log)
	rev := Revision{UUID: entry.UUID, Timestamp: entry.Timestamp, Bundle: ruleset.Bundle{Rules: entry.Rules + extra, DataFiles: entry.DataFiles}}
	if err := px.Load(rev); err != nil {
		p.Metrics.failed(FailureCompile)
		return nil, err
	}
	used[key] = px
	return px, nil
}

func variantKey(pol cache.TablePolicy) string {
	var b strings.Builder
	b.WriteString(pol.RuleSet.Namespace + "/" + pol.RuleSet.Name + "@" + pol.RuleSet.UUID)
	if ex := pol.Exclusions; ex != nil {
		fmt.Fprintf(&b, "|%v|%v|%d", ex.RuleIDs, ex.Tags, ex.InboundAnomalyThreshold)
	}
	for _, l := range pol.SecurityLogs {
		// The name is in the key: the lines carry it (securityLog).
		b.WriteString("|" + l.Name + ":" + l.Type + ":" + l.Path + ":" + l.Server + ":" + l.Protocol)
	}
	return b.String()
}

// Bounds of exclusions, as the RuleSetOverride CRD has them.
const (
	maxExcludedIDs  = 256
	maxExcludedTags = 64
	// thresholdRuleID is the id of the SecAction that sets a route's
	// inbound anomaly threshold, high in the range CRS leaves to users.
	thresholdRuleID = 999999901
)

// tagPattern is a tag of a safe alphabet, of at most maxTagBytes (checked
// apart: a counted repetition compiles to a copy of the class per count).
var tagPattern = regexp.MustCompile(`^[A-Za-z0-9._/-]+$`)

const maxTagBytes = 128

// ExclusionRules renders a route's exclusions as SecLang appended to its
// rule set: SecRuleRemoveById, SecRuleRemoveByTag, and a phase 1 SecAction
// that sets tx.inbound_anomaly_score_threshold after CRS's initialization
// (which only sets it when unset) and before its blocking evaluation. The
// values are checked again here, so nothing but ids, tags of a safe
// alphabet and a number reaches the rules.
func ExclusionRules(ex *cache.Exclusions) (string, error) {
	if ex == nil {
		return "", nil
	}
	if len(ex.RuleIDs) > maxExcludedIDs || len(ex.Tags) > maxExcludedTags {
		return "", fmt.Errorf("exclusions: at most %d rule ids and %d tags", maxExcludedIDs, maxExcludedTags)
	}
	var b strings.Builder
	b.WriteString("\n# RuleSetOverride exclusions (Portal)\n")
	if len(ex.RuleIDs) > 0 {
		b.WriteString("SecRuleRemoveById")
		for _, id := range ex.RuleIDs {
			if id < 1 || id > 999999999 {
				return "", fmt.Errorf("exclusions: rule id %d out of range", id)
			}
			b.WriteString(" " + strconv.FormatInt(id, 10))
		}
		b.WriteString("\n")
	}
	for _, tag := range ex.Tags {
		if len(tag) > maxTagBytes || !tagPattern.MatchString(tag) {
			return "", fmt.Errorf("exclusions: tag %q: want 1 to %d letters, digits and ._/-", tag, maxTagBytes)
		}
		b.WriteString("SecRuleRemoveByTag " + tag + "\n")
	}
	if th := ex.InboundAnomalyThreshold; th != 0 {
		if th < 1 || th > 10000 {
			return "", fmt.Errorf("exclusions: inbound anomaly threshold %d out of range 1-10000", th)
		}
		fmt.Fprintf(&b, "SecAction \"id:%d,phase:1,pass,nolog,setvar:tx.inbound_anomaly_score_threshold=%d\"\n", thresholdRuleID, th)
	}
	return b.String(), nil
}
