//go:build !portal_nodev

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/waf"
	"github.com/vilaca/portal/internal/waf/engine"
)

// With --node, portal dev runs the waf-proxy cookbook for real: Portal's own
// image, built from the checkout and imported into the node as the node's
// other images are, enforces examples/waf's crs in front of a Gateway
// stand-in. No Gateway controller runs here, so the stand-in is what one
// would make of Gateway default/edge: a Service labelled with the Gateway's
// name (GEP-1762), here in front of pods of the hello image.
const (
	devProxyImage = "portal.test/portal:dev"
	devEdgeName   = "edge"
	devEngineName = "edge-waf"
	// devEdgeHost is the Host the hint's curl sends: the CRS flags a
	// numeric Host (rule 920350) on every request to a ClusterIP.
	devEdgeHost = "edge.example"
	// gatewayNameLabel is how a Gateway implementation labels the
	// Gateway's Service (GEP-1762), which the waf-proxy forwards to.
	gatewayNameLabel = "gateway.networking.k8s.io/gateway-name"
)

// startProxyImage builds and imports the waf-proxy image in the background
// (minutes with a cold build cache, seconds after) and returns what waits
// for it.
func startProxyImage(ctx context.Context, cluster *devcluster.Cluster) func() error {
	done := make(chan error, 1)
	go func() { done <- cluster.BuildImage(ctx, "./cmd/portal", devProxyImage) }()
	return func() error {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("waf-proxy image: %w", err)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// cacheReachable says whether pods can reach the rule set cache at addr:
// not when it listens on the host's loopback.
func cacheReachable(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host != "localhost" && (ip == nil || !ip.IsLoopback())
}

// exposeCache makes the cache Portal serves on the host reachable from pods
// by the name data planes use (<service>.<namespace>.svc): a Service
// without a selector and an EndpointSlice with the node's address, as the
// chart's Service would select Portal's pods.
func exposeCache(ctx context.Context, c client.Client, namespace, service, addr string) error {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--waf-cache-addr %q: %w", addr, err)
	}
	port, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		return fmt.Errorf("--waf-cache-addr %q: %w", addr, err)
	}
	const portName = "https"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: service, Namespace: namespace},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: portName, Port: int32(port)}}},
	}
	eps := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: service + "-dev", Namespace: namespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: service,
			discoveryv1.LabelManagedBy:   "portal-dev",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{devcluster.NodeIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, obj := range []client.Object{svc, eps} {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
		}
	}
	return nil
}

// edgeObjects are the Gateway stand-in and the Engine that puts a waf-proxy
// in front of it, in namespace ns (that of examples/waf's RuleSet crs).
func edgeObjects(ns string) []client.Object {
	gw := &unstructured.Unstructured{}
	gw.SetGroupVersionKind(engine.GatewayGVK)
	gw.SetNamespace(ns)
	gw.SetName(devEdgeName)
	gw.Object["spec"] = map[string]any{
		// No controller implements this class: the Service below stands
		// in for what one would create.
		"gatewayClassName": "portal-dev",
		"listeners":        []any{map[string]any{"name": "http", "port": int64(80), "protocol": "HTTP"}},
	}
	eng := &wafv1alpha1.Engine{
		ObjectMeta: metav1.ObjectMeta{Name: devEngineName, Namespace: ns},
		Spec: wafv1alpha1.EngineSpec{
			RuleSet:       wafv1alpha1.EngineRuleSetReference{Name: "crs"},
			Target:        wafv1alpha1.EngineTarget{Type: "Gateway", Name: devEdgeName},
			FailurePolicy: wafv1alpha1.FailurePolicyFail,
			Driver: wafv1alpha1.DriverConfig{
				Type:     wafv1alpha1.DriverWAFProxy,
				WAFProxy: &wafv1alpha1.WAFProxyDriverConfig{Replicas: 1, Port: 80},
			},
		},
	}
	return []client.Object{gw, eng}
}

// runEdge deploys the Gateway stand-in and the Engine once the image is in
// the node, waits until the proxy blocks an attack and passes a plain
// request, and returns the hint that shows both.
func runEdge(ctx context.Context, c client.Client, waitImage func() error) (string, error) {
	if err := waitImage(); err != nil {
		return "", err
	}
	ns := metav1.NamespaceDefault
	dep, svc := nodeWorkload(ns, devEdgeName, 1, map[string]string{gatewayNameLabel: devEdgeName})
	if err := createAvailable(ctx, c, dep, svc, edgeObjects(ns)...); err != nil {
		return "", err
	}
	proxy := client.ObjectKey{Namespace: ns, Name: engine.ChildName(devEngineName)}
	if err := waitAvailable(ctx, c, proxy, 1); err != nil {
		return "", fmt.Errorf("the waf-proxy of Engine %s/%s (kubectl -n %s describe engine %s): %w", ns, devEngineName, ns, devEngineName, err)
	}
	var proxySvc corev1.Service
	if err := c.Get(ctx, proxy, &proxySvc); err != nil {
		return "", err
	}
	base := "http://" + proxySvc.Spec.ClusterIP + "/"
	if err := waitHTTP(ctx, base+"?q=%3Cscript%3Ealert(1)%3C/script%3E", devEdgeHost, http.StatusForbidden, ""); err != nil {
		return "", fmt.Errorf("waf-proxy %s: %w", proxy, err)
	}
	if err := waitHTTP(ctx, base, devEdgeHost, http.StatusOK, "hello from "+devEdgeName+"-"); err != nil {
		return "", fmt.Errorf("waf-proxy %s: %w", proxy, err)
	}
	return fmt.Sprintf("\nA waf-proxy Engine (%s/%s) enforcing examples/waf's crs in front of Gateway %s/%s (stand-in: Service %s labelled %s):\n"+
		"  curl -s -o /dev/null -w '%%{http_code}\\n' -H 'Host: %s' 'http://%s/?q=<script>alert(1)</script>'   # 403\n"+
		"  curl -H 'Host: %s' http://%s/   # hello from %s-<pod>\n",
		ns, devEngineName, ns, devEdgeName, devEdgeName, gatewayNameLabel,
		devEdgeHost, proxySvc.Spec.ClusterIP, devEdgeHost, proxySvc.Spec.ClusterIP, devEdgeName), nil
}

// startEdge decides whether the waf-proxy Engine runs in the node and, if
// Portal is to use the image built here, starts building it.
func (o *devOptions) startEdge(ctx context.Context, out io.Writer, cluster *devcluster.Cluster, changed func(flag string) bool) {
	if !o.node || !o.cfg.WAF {
		return
	}
	if !cacheReachable(o.cfg.WAFOptions.CacheAddr) {
		fmt.Fprintf(out, "portal dev: not deploying the waf-proxy Engine: pods cannot reach the rule set cache on --waf-cache-addr %s (a loopback address)\n", o.cfg.WAFOptions.CacheAddr)
		return
	}
	o.edge = true
	o.waitImage = func() error { return nil }
	if !changed("waf-proxy-image") {
		o.cfg.WAFOptions.Engine.ProxyImage = devProxyImage
		o.waitImage = startProxyImage(ctx, cluster)
	}
}

// cacheService is the name of the Service data planes reach the cache by.
func (o *devOptions) cacheService() string {
	if s := o.cfg.WAFOptions.CacheService; s != "" {
		return s
	}
	return waf.DefaultCacheService
}
