package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/driver"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

func init() { driver.Register(wafProxy{}) }

// wafProxy is the waf-proxy driver: `portal waf-proxy` (Coraza built with
// Go, the same build that validates rules in the controller) deployed in
// front of the target Gateway's Service, applying the Gateway's route
// table. No Istio needed.
type wafProxy struct{}

func (wafProxy) Name() wafv1alpha1.DriverType { return wafv1alpha1.DriverWAFProxy }

// Limits: none; the waf-proxy runs everything the sandbox admits.
func (wafProxy) Limits() ruleset.Limits { return ruleset.Limits{} }

// Owned: the Deployment, Service, PodDisruptionBudget and CA ConfigMap.
func (wafProxy) Owned(_ driver.Settings, eng *wafv1alpha1.Engine) []driver.Object {
	name := ChildName(eng.Name)
	return []driver.Object{
		{GVK: appsv1.SchemeGroupVersion.WithKind("Deployment"), Namespace: eng.Namespace, Name: name},
		{GVK: corev1.SchemeGroupVersion.WithKind("Service"), Namespace: eng.Namespace, Name: name},
		{GVK: policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"), Namespace: eng.Namespace, Name: name},
		{GVK: corev1.SchemeGroupVersion.WithKind("ConfigMap"), Namespace: eng.Namespace, Name: CAConfigMapName(eng.Name)},
	}
}

// Where the waf-proxy pod finds its cache credentials, and its ports.
const (
	ProxyTokenDir   = "/var/run/secrets/portal/waf-cache"
	ProxyTokenPath  = ProxyTokenDir + "/token"
	ProxyCADir      = "/var/run/portal/waf-cache-ca"
	ProxyCAPath     = ProxyCADir + "/ca.crt"
	proxyListenPort = 8000
	proxyMetricPort = 9090
	// The waf-proxy's body caps, its defaults (proxy.DefaultMax*BodyBytes,
	// which this package cannot import: the proxy's tests import it).
	proxyMaxRequestBody  = 32 << 20
	proxyMaxResponseBody = 1 << 20
	// proxyTokenSeconds is the projected token's lifetime; the kubelet
	// renews it at 80% and the proxy re-reads the file before each poll.
	proxyTokenSeconds = 3600
	// ProxyTokenAudience is the audience of the waf-proxy's projected
	// token: the cache's own, not one rule set's (TokenAudience), as the
	// proxy reads its Gateway's route table and every rule set the table
	// runs. The token never leaves the pod, and the cache still limits it
	// to the Engine's namespace (and the rule sets its tables reference).
	ProxyTokenAudience = cache.Audience
)

// proxyPodLabels select one Engine's waf-proxy pods.
func proxyPodLabels(eng *wafv1alpha1.Engine) map[string]string {
	return map[string]string{"app.kubernetes.io/name": "waf-proxy", "app.kubernetes.io/instance": ChildName(eng.Name)}
}

// upstream finds the Gateway's Service: the one labelled with the Gateway's
// name (the first by name when several are), and the port to proxy to.
func upstream(ctx context.Context, h driver.Host, eng *wafv1alpha1.Engine) (string, error) {
	var list corev1.ServiceList
	if err := h.Reader().List(ctx, &list, client.InNamespace(eng.Namespace),
		client.MatchingLabels{wafv1alpha1.GatewayNameLabel: eng.Spec.Target.Name}); err != nil {
		return "", fmt.Errorf("list the Services of Gateway %s: %w", eng.Spec.Target.Name, err)
	}
	svcs := slices.DeleteFunc(list.Items, func(s corev1.Service) bool { return s.Labels[LabelManagedBy] == FieldOwner })
	if len(svcs) == 0 {
		return "", &targetServiceNotFound{namespace: eng.Namespace, gateway: eng.Spec.Target.Name}
	}
	slices.SortFunc(svcs, func(a, b corev1.Service) int { return strings.Compare(a.Name, b.Name) })
	svc := svcs[0]
	port := int32(0)
	if p := eng.Spec.Driver.WAFProxy; p != nil && p.UpstreamPort != 0 {
		port = p.UpstreamPort
	} else if len(svc.Spec.Ports) > 0 {
		port = svc.Spec.Ports[0].Port
	}
	if port == 0 {
		return "", fmt.Errorf("service %s/%s has no port: set spec.driver.wafProxy.upstreamPort", svc.Namespace, svc.Name)
	}
	return fmt.Sprintf("http://%s.%s.svc:%d", svc.Name, svc.Namespace, port), nil
}

// Provision applies the waf-proxy data plane: the NetworkPolicy to the
// cache, the ServiceAccount whose projected token the proxy sends, the
// cache's CA, and the Deployment, Service and PodDisruptionBudget.
func (wafProxy) Provision(ctx context.Context, h driver.Host, eng *wafv1alpha1.Engine) (driver.Result, error) {
	s := h.Settings()
	def := s.Images[wafv1alpha1.DriverWAFProxy]
	cfg := wafv1alpha1.WAFProxyDriverConfig{Replicas: 2, Port: 80}
	if p := eng.Spec.Driver.WAFProxy; p != nil {
		cfg = *p
		if cfg.Replicas == 0 {
			cfg.Replicas = 2
		}
		if cfg.Port == 0 {
			cfg.Port = 80
		}
	}
	if err := checkImage(s, cfg.Image, def, "spec.driver.wafProxy.image"); err != nil {
		return driver.Result{}, err
	}
	if cfg.Image == "" {
		cfg.Image = def
	}
	if cfg.Image == "" {
		return driver.Result{}, &noImage{what: "waf-proxy", field: "spec.driver.wafProxy.image", flag: "--waf-proxy-image"}
	}
	ca := s.CABundle()
	if len(ca) == 0 {
		return driver.Result{}, errors.New("the cache's CA is not issued yet")
	}
	up, err := upstream(ctx, h, eng)
	if err != nil {
		return driver.Result{}, err
	}
	if err := h.AllowCache(ctx, eng, proxyPodLabels(eng)); err != nil {
		return driver.Result{}, err
	}
	if _, err := h.ServiceAccount(ctx, eng); err != nil {
		return driver.Result{}, err
	}
	name := ChildName(eng.Name)
	for _, o := range proxyObjects(s, eng, cfg, ca, up) {
		if err := h.Apply(ctx, o); err != nil {
			return driver.Result{}, err
		}
	}
	return driver.Result{Message: fmt.Sprintf("waf-proxy %s enforces RuleSet %s in front of %s; send traffic to Service %s", name, eng.Spec.RuleSet.Name, up, name)}, nil
}

// proxyObjects are the waf-proxy's CA ConfigMap, Deployment, Service and
// PodDisruptionBudget, in the order they are applied.
func proxyObjects(s driver.Settings, eng *wafv1alpha1.Engine, cfg wafv1alpha1.WAFProxyDriverConfig, ca []byte, up string) []client.Object {
	name := ChildName(eng.Name)
	om := func(n string) metav1.ObjectMeta {
		l := labels(eng)
		for k, v := range proxyPodLabels(eng) {
			l[k] = v
		}
		return metav1.ObjectMeta{Name: n, Namespace: eng.Namespace, Labels: l, OwnerReferences: []metav1.OwnerReference{ownerRef(eng)}}
	}
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: om(CAConfigMapName(eng.Name)),
		Data:       map[string]string{"ca.crt": string(ca)},
	}
	dep := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: om(name),
		Spec: appsv1.DeploymentSpec{
			Replicas: &cfg.Replicas,
			Selector: &metav1.LabelSelector{MatchLabels: proxyPodLabels(eng)},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: proxyPodLabels(eng)},
				Spec:       proxyPod(s, eng, name, cfg.Image, up),
			},
		},
	}
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: om(name),
		Spec: corev1.ServiceSpec{
			Selector: proxyPodLabels(eng),
			Ports: []corev1.ServicePort{{
				Name: "http", Port: cfg.Port, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http"),
			}},
		},
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: om(name),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &one,
			Selector:       &metav1.LabelSelector{MatchLabels: proxyPodLabels(eng)},
		},
	}
	return []client.Object{cm, dep, svc, pdb}
}

// proxyArgs are the arguments of `portal waf-proxy` for an Engine: the
// Gateway's route table decides per request, so the WAFGatewayBindingPolicies
// and RuleSetOverrides attached to the Gateway and its routes apply, and the
// Engine's RuleSet guards the requests no policy covers. The body caps are
// spelled out because the pod's memory limit is sized against them: one
// proxy serves every route of a shared Gateway, so no tenant's rule set may
// make it buffer more of a request or a response than they allow.
func proxyArgs(s driver.Settings, eng *wafv1alpha1.Engine, upstream string) []string {
	return []string{
		"waf-proxy",
		fmt.Sprintf("--cache-url=https://%s.%s.svc:%d", s.CacheService, s.Namespace, s.CachePort),
		"--gateway=" + eng.Namespace + "/" + eng.Spec.Target.Name,
		"--ruleset=" + eng.Namespace + "/" + eng.Spec.RuleSet.Name,
		"--upstream=" + upstream,
		"--ca-file=" + ProxyCAPath,
		"--token-file=" + ProxyTokenPath,
		fmt.Sprintf("--poll-interval=%ds", pollSeconds(eng)),
		"--failure-policy=" + failurePolicy(eng),
		fmt.Sprintf("--listen=:%d", proxyListenPort),
		fmt.Sprintf("--metrics-bind-address=:%d", proxyMetricPort),
		fmt.Sprintf("--max-request-body-bytes=%d", proxyMaxRequestBody),
		fmt.Sprintf("--max-response-body-bytes=%d", proxyMaxResponseBody),
	}
}

func proxyPod(s driver.Settings, eng *wafv1alpha1.Engine, name, image, upstream string) corev1.PodSpec {
	t, f := true, false
	secs := int64(proxyTokenSeconds)
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("metrics")}}}
	}
	return corev1.PodSpec{
		ServiceAccountName:           name,
		AutomountServiceAccountToken: &f,
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   &t,
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name:  "waf-proxy",
			Image: image,
			Args:  proxyArgs(s, eng, upstream),
			Ports: []corev1.ContainerPort{
				{Name: "http", ContainerPort: proxyListenPort, Protocol: corev1.ProtocolTCP},
				{Name: "metrics", ContainerPort: proxyMetricPort, Protocol: corev1.ProtocolTCP},
			},
			// Requests let the pods schedule under a ResourceQuota; the
			// memory limit bounds a proxy that buffers request bodies
			// and responses (--max-request-body-bytes,
			// --max-response-body-bytes).
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
			},
			ReadinessProbe: probe("/readyz"),
			LivenessProbe:  probe("/healthz"),
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: &f,
				ReadOnlyRootFilesystem:   &t,
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "waf-cache-token", MountPath: ProxyTokenDir, ReadOnly: true},
				{Name: "waf-cache-ca", MountPath: ProxyCADir, ReadOnly: true},
				{Name: "tmp", MountPath: "/tmp"},
			},
		}},
		Volumes: []corev1.Volume{
			{Name: "waf-cache-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Audience: ProxyTokenAudience, ExpirationSeconds: &secs, Path: "token",
				}}},
			}}},
			{Name: "waf-cache-ca", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: CAConfigMapName(eng.Name)},
			}}},
			// Defence in depth: the image's portal binary (built with
			// -tags portal_nodev, without envtest) writes nothing at
			// start, but a scratch /tmp keeps an image built otherwise,
			// or a library that wants one later, from failing on the
			// read-only root.
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
				SizeLimit: ptr.To(resource.MustParse("16Mi")),
			}}},
		},
	}
}
