package waf_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// A tenant's RuleSet named like the S3 bundle a WAFGatewayBindingPolicy of
// its namespace enforces ("bundle-" and the first 20 hex digits of its
// sha256, the bundle's name until bundles moved to a name no Kubernetes
// object can have) neither replaces the bundle in the rule set cache nor
// takes it along when deleted: data planes reading the bundle's name over
// the cache's HTTPS API get the bundle's rules, and the RuleSet is served
// under its own name as before. The bundle's own name cannot be taken: the
// API server refuses a RuleSet named so.
func TestRuleSetNamedLikeABundleDoesNotCollide(t *testing.T) {
	cluster(t)
	ns := namespace(t, "waf-bundle-clash")
	ctx := context.Background()
	sum := sha256.Sum256([]byte("a bundle in storage"))
	sha := hex.EncodeToString(sum[:])
	const bundleRules = "SecRuleEngine On\nSecRule ARGS \"@contains attack\" \"id:7201,phase:1,deny,status:403\"\n"
	rs := waf.InstallBundle(env.layer.Cache, ns, sha, ruleset.Bundle{Rules: bundleRules})
	t.Cleanup(func() { env.layer.Cache.Delete(cache.Key(rs.Namespace, rs.Name)) })

	clash := "bundle-" + sha[:20]
	create(t, source(ns, "off", "SecRuleEngine Off\n"))
	tenant := ruleSet(ns, clash, []string{"off"})
	create(t, tenant)
	readyWith(t, tenant, metav1.ConditionTrue, wafv1alpha1.ReasonRulesCached)
	if e, err := env.cache.Entry(ctx, rs.Namespace, rs.Name); err != nil || e.Rules != bundleRules || e.UUID != rs.UUID {
		t.Fatalf("the bundle's entry after the RuleSet %s was cached: %q %s, %v; want the bundle's rules, revision %s", clash, e.Rules, e.UUID, err, rs.UUID)
	}
	if e, err := env.cache.Entry(ctx, ns, clash); err != nil || !strings.Contains(e.Rules, "SecRuleEngine Off") {
		t.Fatalf("the RuleSet %s is not served under its name: %q, %v", clash, e.Rules, err)
	}

	if err := env.client.Delete(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the deleted RuleSet's entry gone", func() bool {
		_, err := env.cache.Latest(ctx, ns, clash)
		return errors.Is(err, cache.ErrNotFound)
	})
	if e, err := env.cache.Entry(ctx, rs.Namespace, rs.Name); err != nil || e.Rules != bundleRules {
		t.Fatalf("the bundle's entry after the RuleSet %s was deleted: %q, %v", clash, e.Rules, err)
	}

	taken := ruleSet(ns, rs.Name, []string{"off"})
	if err := env.client.Create(ctx, taken); !apierrors.IsInvalid(err) {
		t.Fatalf("creating a RuleSet named %s: %v, want Invalid", rs.Name, err)
	}
}
