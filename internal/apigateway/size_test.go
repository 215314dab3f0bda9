package apigateway_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	gatewayv1alpha1 "github.com/vilaca/portal/api/gateway/v1alpha1"
)

// bigRule is an open APIRule whose CORS policy takes about 96 KiB: every
// list field at its maximum.
func bigRule(ns, name, gateway, svc, host string) *gatewayv1alpha1.APIRule {
	api := simpleRule(ns, name, gateway, svc, host)
	cors := &gatewayv1alpha1.CorsPolicy{}
	for i := range 64 {
		h := fmt.Sprintf("X-%03d-%s", i, strings.Repeat("h", 250))
		cors.AllowHeaders = append(cors.AllowHeaders, h)
		cors.ExposeHeaders = append(cors.ExposeHeaders, h)
		cors.AllowOrigins = append(cors.AllowOrigins, gatewayv1alpha1.StringMatch{
			Exact: ptr.To(fmt.Sprintf("https://%03d.%s.example.com", i, strings.Repeat("o", 990)))})
	}
	api.Spec.CorsPolicy = cors
	return api
}

// TestAPIRuleReconcileDoesNotCopyOthers: while a tenant keeps 60 APIRules
// of about 100 KiB each, reconciling another small APIRule costs Portal
// far less than their size. The host check reads every APIRule of the
// cluster; copying each for every reconcile (and for every status write
// of any of them) made each tenant's large objects cost every reconcile
// of everyone's.
func TestAPIRuleReconcileDoesNotCopyOthers(t *testing.T) {
	ctx := setup(t)
	istioGateway(t, ctx, "istio-system", "tenants-gateway", "*.tenants.example.com")
	ns := namespace(t, ctx, "size-tenant")
	workload(t, ctx, ns, "web", 8000, true, nil)
	const n = 60
	var big []*gatewayv1alpha1.APIRule
	for i := range n {
		api := bigRule(ns, fmt.Sprintf("big-%d", i), "istio-system/tenants-gateway", "web", fmt.Sprintf("big-%d.tenants.example.com", i))
		if err := k8s.Create(ctx, api); err != nil {
			t.Fatal(err)
		}
		big = append(big, api)
	}
	for _, api := range big {
		waitState(t, ctx, api, gatewayv1alpha1.StateReady)
	}

	// The big APIRules' last reconciles (their owned objects' events)
	// run on for a few seconds after they report Ready.
	quiesce(t)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	small := simpleRule(ns, "small", "istio-system/tenants-gateway", "web", "small.tenants.example.com")
	if err := k8s.Create(ctx, small); err != nil {
		t.Fatal(err)
	}
	waitState(t, ctx, small, gatewayv1alpha1.StateReady)
	runtime.ReadMemStats(&after)
	// The big APIRules hold about n*96 KiB: a third of one copy of them.
	const budget = n * 32 << 10
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("reconciling the small APIRule allocated %d KiB", alloc>>10)
	if alloc > budget {
		t.Errorf("reconciling one small APIRule allocated %d KiB beside %d APIRules of about 96 KiB, want under %d KiB (a third of one copy of them)", alloc>>10, n, budget>>10)
	}
}

// quiesce waits until the process allocates next to nothing between three
// polls in a row: the controllers have settled.
func quiesce(t *testing.T) {
	t.Helper()
	var last uint64
	calm := 0
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		if m.TotalAlloc-last < 256<<10 {
			calm++
		} else {
			calm = 0
		}
		last = m.TotalAlloc
		return calm >= 3, nil
	})
	if err != nil {
		t.Fatalf("the controllers never settled: %v", err)
	}
}
