package waf_test

import (
	"context"
	"errors"
	"k8s.io/client-go/util/retry"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/controller"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

const crs = "Include @coraza.conf-recommended\nInclude @crs-setup.conf.example\nInclude @owasp_crs/*.conf\n"

const custom = "SecRuleEngine On\n# block listed words\nSecRule ARGS \"@pmFromFile words.txt\" \"id:100001,phase:2,deny,status:403\"\n"

// served fetches the RuleSet's latest revision from the cache server over
// HTTP and compiles it as the waf-proxy does; it returns the revision id and
// the status of a GET with ?q=word.
func served(t *testing.T, ns, name, word string) (string, int) {
	t.Helper()
	ctx := context.Background()
	e, err := env.cache.Entry(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ruleset.Compile(ruleset.Bundle{Rules: e.Rules, DataFiles: e.DataFiles}, ruleset.Options{})
	if err != nil {
		t.Fatalf("served revision does not compile: %v", err)
	}
	defer c.Close()
	tx := c.WAF.NewTransaction()
	defer tx.Close()
	tx.ProcessURI("/?q="+word, "GET", "HTTP/1.1")
	tx.AddRequestHeader("Host", "example.com")
	if it := tx.ProcessRequestHeaders(); it != nil {
		return e.UUID, it.Status
	}
	if it, _ := tx.ProcessRequestBody(); it != nil {
		return e.UUID, it.Status
	}
	return e.UUID, 0
}

// update changes the latest version of obj, again on a conflict: Portal
// writes the status of RuleSets, RuleSources and RuleData meanwhile.
func update(t *testing.T, obj client.Object, change func()) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return env.client.Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRuleSetLifecycle(t *testing.T) {
	cluster(t)
	ns := namespace(t, "waf-lifecycle")
	key := cache.Key(ns, "guard")
	src, words := source(ns, "custom", custom), data(ns, "words", map[string]string{"words.txt": "evil\n"})
	rs := ruleSet(ns, "guard", []string{"crs", "custom"}, "words")
	create(t, source(ns, "crs", crs), src, words, rs)

	// A good rule set: Ready, cached, served; the CRS holds rules the Istio
	// WASM driver cannot run, which do not degrade it while no Engine with
	// that driver uses it, and do once one does.
	readyWith(t, rs, metav1.ConditionTrue, wafv1alpha1.ReasonRulesCached)
	eventually(t, "Degraded=False UnsupportedRulesUnused", func() bool {
		_, d := conditionsOf(t, rs)
		return d != nil && d.Status == metav1.ConditionFalse && d.Reason == wafv1alpha1.ReasonUnsupportedRulesUnused && contains(d.Message, "920171")
	})
	create(t, &wafv1alpha1.Engine{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "edge"}, Spec: wafv1alpha1.EngineSpec{
		RuleSet: wafv1alpha1.EngineRuleSetReference{Name: "guard"}, Target: wafv1alpha1.EngineTarget{Name: "gw"},
		Driver: wafv1alpha1.DriverConfig{Type: wafv1alpha1.DriverIstioWASM}}})
	eventually(t, "Degraded=UnsupportedRules", func() bool {
		_, d := conditionsOf(t, rs)
		return d != nil && d.Status == metav1.ConditionTrue && d.Reason == wafv1alpha1.ReasonUnsupportedRules && contains(d.Message, "920171") && contains(d.Message, "used by Engine edge")
	})
	first := rs.Status.CachedRevision
	if first == nil || rs.Status.RuleCount < 600 || len(rs.Status.UnsupportedRules) == 0 || rs.Status.Error != nil {
		t.Fatalf("status %+v", rs.Status)
	}
	if id, code := served(t, ns, "guard", "evil"); id != first.UUID || code != 403 {
		t.Fatalf("served %s blocks evil with %d; want %s and 403", id, code, first.UUID)
	}
	eventually(t, "UnsupportedRules event", func() bool { return hasEvent(t, rs, wafv1alpha1.ReasonUnsupportedRules) })

	// Unchanged inputs: an annotation edit makes the compiler look again,
	// and it creates no revision.
	before := compiles(t, controller.ResultUnchanged)
	update(t, rs, func() { rs.Annotations = map[string]string{"team": "a"} })
	eventually(t, "an unchanged reconcile", func() bool { return compiles(t, controller.ResultUnchanged) > before })
	if n := env.layer.Cache.Revisions(key); n != 1 {
		t.Fatalf("%d revisions after an unchanged reconcile", n)
	}

	// A RuleData change is a new revision.
	update(t, words, func() { words.Spec.Files["words.txt"] = "wicked\n" })
	eventually(t, "a new revision", func() bool {
		conditionsOf(t, rs)
		return rs.Status.CachedRevision != nil && rs.Status.CachedRevision.UUID != first.UUID
	})
	second := rs.Status.CachedRevision
	if id, code := served(t, ns, "guard", "wicked"); id != second.UUID || code != 403 || env.layer.Cache.Revisions(key) != 2 {
		t.Fatalf("served %s blocks wicked with %d, %d revisions", id, code, env.layer.Cache.Revisions(key))
	}

	brokenEdits(t, rs, src, second)

	// The opt-out annotation acknowledges the unsupported rules.
	update(t, rs, func() { rs.Annotations[wafv1alpha1.AnnotationAllowUnsupportedRules] = "true" })
	eventually(t, "Degraded=False/UnsupportedRulesAllowed", func() bool {
		_, d := conditionsOf(t, rs)
		return d != nil && d.Status == metav1.ConditionFalse && d.Reason == wafv1alpha1.ReasonUnsupportedRulesAllowed
	})

	// Deleting the RuleSet removes it from the cache.
	if err := env.client.Delete(context.Background(), rs); err != nil {
		t.Fatal(err)
	}
	eventually(t, "404 from the cache", func() bool {
		_, err := env.cache.Latest(context.Background(), ns, "guard")
		return errors.Is(err, cache.ErrNotFound)
	})
}

func TestRuleSetMissingReferences(t *testing.T) {
	cluster(t)
	ns := namespace(t, "waf-missing")
	rs := ruleSet(ns, "waiting", []string{"first", "later"}, "lists")
	create(t, source(ns, "first", "SecRuleEngine On\n"), rs)
	readyWith(t, rs, metav1.ConditionFalse, wafv1alpha1.ReasonRuleSourceNotFound)
	_, d := conditionsOf(t, rs)
	if d.Status != metav1.ConditionTrue || d.Reason != wafv1alpha1.ReasonRuleSourceNotFound || !contains(d.Message, "later", "nothing is served") {
		t.Fatalf("Degraded %+v", d)
	}
	if _, err := env.cache.Latest(context.Background(), ns, "waiting"); !errors.Is(err, cache.ErrNotFound) {
		t.Fatalf("a RuleSet with a missing source is served: %v", err)
	}

	// Creating the source triggers the RuleSet (field index); the RuleData
	// is missing next.
	create(t, source(ns, "later", "SecRule ARGS \"@pmFromFile ips.txt\" \"id:1,phase:1,deny\"\n"))
	readyWith(t, rs, metav1.ConditionFalse, wafv1alpha1.ReasonRuleDataNotFound)
	create(t, data(ns, "lists", map[string]string{"ips.txt": "10.0.0.1\n"}))
	readyWith(t, rs, metav1.ConditionTrue, wafv1alpha1.ReasonRulesCached)
	_, d = conditionsOf(t, rs)
	if d.Status != metav1.ConditionFalse || d.Reason != wafv1alpha1.ReasonAsExpected || rs.Status.RuleCount != 1 {
		t.Fatalf("Degraded %+v, %d rules", d, rs.Status.RuleCount)
	}
}

func TestAPIServerValidation(t *testing.T) {
	cluster(t)
	ns := namespace(t, "waf-validation")
	for _, o := range []client.Object{
		data(ns, "bad-name", map[string]string{"../etc/passwd": "x"}),
		data(ns, "dot-dot", map[string]string{"..": "x"}),
		data(ns, "empty", map[string]string{}),
		source(ns, "empty", ""),
		ruleSet(ns, "no-sources", nil),
	} {
		if err := env.client.Create(context.Background(), o); err == nil {
			t.Errorf("API server accepted %s", o.GetName())
		}
	}
	if err := env.client.Create(context.Background(), data(ns, "ok", map[string]string{"a-b_c.1.txt": "x"})); err != nil {
		t.Errorf("valid RuleData rejected: %v", err)
	}

	// One RuleSource (or RuleData) listed many times: the API server refuses
	// the RuleSet, so no replica joins one large source 2,048 times.
	many := make([]string, 2048)
	for i := range many {
		many[i] = "big"
	}
	for _, rs := range []*wafv1alpha1.RuleSet{ruleSet(ns, "dup-sources", many), ruleSet(ns, "dup-data", []string{"a"}, "ok", "other", "ok")} {
		err := env.client.Create(context.Background(), rs)
		if err == nil || !contains(err.Error(), "Duplicate value") {
			t.Errorf("RuleSet %s: %v, want a Duplicate value error", rs.Name, err)
		}
	}
}

// brokenEdits breaks the custom RuleSource twice (a compile error, then a
// sandbox violation) and fixes it: the RuleSet reports each failure with the
// source and line while the cache keeps serving the good revision, and the
// fix brings no new revision because the content is the served one.
func brokenEdits(t *testing.T, rs *wafv1alpha1.RuleSet, src *wafv1alpha1.RuleSource, second *wafv1alpha1.Revision) {
	t.Helper()
	ns, key := rs.Namespace, cache.Key(rs.Namespace, rs.Name)
	// Broken SecLang: Degraded with the source and line; the previous
	// revision is still served.
	update(t, src, func() { src.Spec.Rules = custom + "SecRule ARGS \"@rx x\" \"id:100002,deny,nosuchaction\"\n" })
	eventually(t, "Ready=False/InvalidRuleSet", func() bool {
		r, d := conditionsOf(t, rs)
		return r != nil && r.Reason == wafv1alpha1.ReasonInvalidRuleSet && r.Status == metav1.ConditionFalse &&
			d.Status == metav1.ConditionTrue && d.Reason == wafv1alpha1.ReasonInvalidRuleSet
	})
	r, _ := conditionsOf(t, rs)
	if e := rs.Status.Error; e == nil || e.Source != "custom" || e.Line != 4 || !contains(e.Message, "nosuchaction") ||
		!contains(r.Message, `RuleSource "custom" line 4`, second.UUID) {
		t.Fatalf("error %+v, message %q", rs.Status.Error, r.Message)
	}
	if id, code := served(t, ns, rs.Name, "wicked"); id != second.UUID || code != 403 || rs.Status.CachedRevision.UUID != second.UUID {
		t.Fatalf("after a broken edit, served %s (%d), status revision %s; want %s", id, code, rs.Status.CachedRevision.UUID, second.UUID)
	}
	eventually(t, "InvalidRuleSet event", func() bool { return hasEvent(t, rs, wafv1alpha1.ReasonInvalidRuleSet) })

	// A sandbox violation is its own reason.
	update(t, src, func() { src.Spec.Rules = custom + "SecAuditLog /var/log/audit.log\n" })
	eventually(t, "Ready=False/SandboxViolation", func() bool {
		r, _ := conditionsOf(t, rs)
		return r != nil && r.Reason == wafv1alpha1.ReasonSandboxViolation && rs.Status.Error != nil && rs.Status.Error.Line == 4
	})

	// Fixed back to the second revision's content: Ready, and no new revision.
	update(t, src, func() { src.Spec.Rules = custom })
	eventually(t, "Ready=True again", func() bool {
		r, _ := conditionsOf(t, rs)
		return r != nil && r.Status == metav1.ConditionTrue && rs.Status.Error == nil
	})
	if rs.Status.CachedRevision.UUID != second.UUID || env.layer.Cache.Revisions(key) != 2 {
		t.Fatalf("revision %s, %d revisions; want %s, 2", rs.Status.CachedRevision.UUID, env.layer.Cache.Revisions(key), second.UUID)
	}
}

// TestRuleSourceAndDataSayWhoUsesThem: kubectl get wrsrc / wrd showed only
// NAME and AGE. Their status (and the RULESETS column) says which RuleSets
// use them, updated when a RuleSet starts or stops naming them.
func TestRuleSourceAndDataSayWhoUsesThem(t *testing.T) {
	cluster(t)
	ns := namespace(t, "waf-usage")
	src, words := source(ns, "custom", custom), data(ns, "words", map[string]string{"words.txt": "evil\n"})
	a, b := ruleSet(ns, "a", []string{"custom"}, "words"), ruleSet(ns, "b", []string{"custom"})
	create(t, src, words, a, b)
	usage := func(o client.Object) wafv1alpha1.UsageStatus {
		if err := env.client.Get(context.Background(), client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		switch o := o.(type) {
		case *wafv1alpha1.RuleSource:
			return o.Status
		case *wafv1alpha1.RuleData:
			return o.Status
		}
		return wafv1alpha1.UsageStatus{}
	}
	eventually(t, "RuleSource custom used by a and b, RuleData words by a", func() bool {
		s, d := usage(src), usage(words)
		return s.RuleSetCount == 2 && strings.Join(s.RuleSets, ",") == "a,b" && d.RuleSetCount == 1 && strings.Join(d.RuleSets, ",") == "a"
	})
	update(t, a, func() { a.Spec.Data = nil })
	eventually(t, "RuleData words used by nothing once a stops naming it", func() bool {
		d := usage(words)
		return d.RuleSetCount == 0 && len(d.RuleSets) == 0
	})
}
