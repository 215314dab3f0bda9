package engine

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/driver"
)

// host is what the Engine controller lends the drivers (driver.Host): the
// reconciler's settings, clock and client, and the objects every data
// plane shares.
type host struct{ r *Reconciler }

var _ driver.Host = host{}

func (h host) Settings() driver.Settings { return h.r.settings }
func (h host) Clock() clock.PassiveClock { return h.r.opts.Clock }
func (h host) Reader() client.Reader     { return h.r.reader }

func (h host) Apply(ctx context.Context, obj runtime.Object) error {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return h.r.applyUnstructured(ctx, u)
	}
	return h.r.apply(ctx, obj)
}

func (h host) AllowCache(ctx context.Context, eng *wafv1alpha1.Engine, from map[string]string) error {
	return h.r.applyNetworkPolicy(ctx, eng, from)
}

func (h host) ServiceAccount(ctx context.Context, eng *wafv1alpha1.Engine) (*corev1.ServiceAccount, error) {
	return h.r.applyServiceAccount(ctx, eng)
}

func (h host) Token(ctx context.Context, eng *wafv1alpha1.Engine, sa *corev1.ServiceAccount, audience string) (driver.Token, error) {
	t, err := h.r.ensureToken(ctx, eng, sa, audience)
	if err != nil {
		return driver.Token{}, err
	}
	return driver.Token{Value: t.value, Expires: t.expires, RenewAt: t.renewAt}, nil
}

// driverSettings are the Options a driver reads.
func driverSettings(o Options) driver.Settings {
	return driver.Settings{
		Namespace: o.Namespace, CacheService: o.CacheService, CachePort: o.CachePort, CABundle: o.CABundle,
		Images: map[wafv1alpha1.DriverType]string{
			wafv1alpha1.DriverIstioWASM: o.WASMImage,
			wafv1alpha1.DriverWAFProxy:  o.ProxyImage,
		},
		AllowedImages: o.AllowedImages, OperatorName: o.OperatorName,
	}
}
