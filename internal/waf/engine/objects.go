package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
)

// Labels and annotations on what the controller creates.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelEngine    = "waf.portal.io/engine"
	// AnnotationEngine says which Engine (namespace/name) an object in
	// Portal's namespace belongs to.
	AnnotationEngine = "waf.portal.io/engine"
)

// Kinds the drivers write besides the core ones.
var (
	WasmPluginGVK      = schema.GroupVersionKind{Group: "extensions.istio.io", Version: "v1alpha1", Kind: "WasmPlugin"}
	ServiceEntryGVK    = schema.GroupVersionKind{Group: "networking.istio.io", Version: "v1", Kind: "ServiceEntry"}
	DestinationRuleGVK = schema.GroupVersionKind{Group: "networking.istio.io", Version: "v1", Kind: "DestinationRule"}
)

// objectSet selects the objects teardown removes.
type objectSet int

const (
	wasmObjects   objectSet = 1 << iota // the WasmPlugin, its DestinationRule and CA Secret
	proxyObjects                        // the waf-proxy Deployment, Service, PDB and CA ConfigMap
	sharedObjects                       // the ServiceAccount and the cache NetworkPolicy
	allObjects    = wasmObjects | proxyObjects | sharedObjects
)

// ChildName is the name of the objects an Engine owns in its namespace:
// waf-engine-<name>. Service names must be DNS labels while Engine names
// may hold dots and run to 253 characters, so such names have their dots
// replaced and are cut to fit, with a hash of the whole name appended so
// two Engines never share a name.
func ChildName(engineName string) string {
	const prefix, most = "waf-engine-", 63
	n := prefix + engineName
	if len(n) <= most && !strings.Contains(engineName, ".") {
		return n
	}
	sum := sha256.Sum256([]byte(engineName))
	h := hex.EncodeToString(sum[:])[:10]
	n = strings.ReplaceAll(n, ".", "-")
	if len(n) > most-len(h)-1 {
		n = n[:most-len(h)-1]
	}
	return n + "-" + h
}

// NetworkPolicyName is the name of the NetworkPolicy, in Portal's
// namespace, that lets the Engine's data plane reach the cache.
func NetworkPolicyName(namespace, engineName string) string {
	sum := sha256.Sum256([]byte(namespace + "/" + engineName))
	return "waf-engine-cache-" + hex.EncodeToString(sum[:])[:16]
}

// CAConfigMapName is the ConfigMap holding the cache's CA for a waf-proxy.
func CAConfigMapName(engineName string) string { return ChildName(engineName) + "-ca" }

// CASecretName is the Secret holding the cache's CA for the istio-wasm
// driver's DestinationRule (credentialName) when --operator-name is set.
func CASecretName(engineName string) string { return ChildName(engineName) + "-cache-ca" }

// CASecretKey is the key of the CA in that Secret: the one Istio reads a
// DestinationRule credential's CA certificates from.
const CASecretKey = "cacert"

func newUnstructured(gvk schema.GroupVersionKind, metadata map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": metadata}}
	u.SetGroupVersionKind(gvk)
	return u
}

func toUnstructured(obj any) (map[string]any, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %T: %w", obj, err)
	}
	return m, nil
}

// ownerRef makes the Engine the controller of an object in its namespace,
// so a cluster's garbage collector removes it too.
func ownerRef(eng *wafv1alpha1.Engine) metav1.OwnerReference {
	t := true
	return metav1.OwnerReference{
		APIVersion: wafv1alpha1.GroupVersion.String(), Kind: "Engine", Name: eng.Name, UID: eng.UID,
		Controller: &t, BlockOwnerDeletion: &t,
	}
}

// labels are the labels of everything an Engine owns.
func labels(eng *wafv1alpha1.Engine) map[string]string {
	return map[string]string{LabelManagedBy: FieldOwner, LabelEngine: ChildName(eng.Name)}
}

// apply server-side applies a typed object (its TypeMeta set) as Portal.
func (r *Reconciler) apply(ctx context.Context, obj runtime.Object) error {
	m, err := toUnstructured(obj)
	if err != nil {
		return err
	}
	delete(m, "status")
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	return r.applyUnstructured(ctx, &unstructured.Unstructured{Object: m})
}

func (r *Reconciler) applyUnstructured(ctx context.Context, u *unstructured.Unstructured) error {
	err := r.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership)
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("%s (%s) is not installed in the cluster", u.GetKind(), u.GroupVersionKind().GroupVersion())
	}
	if err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// teardown deletes the objects of set that the Engine owns; absent objects
// and kinds are fine.
func (r *Reconciler) teardown(ctx context.Context, eng *wafv1alpha1.Engine, set objectSet) error {
	name := ChildName(eng.Name)
	type target struct {
		gvk       schema.GroupVersionKind
		namespace string
		name      string
	}
	var ts []target
	if set&wasmObjects != 0 {
		ts = append(ts, target{WasmPluginGVK, eng.Namespace, name})
		// Only with --operator-name does Portal write these, and only then
		// does the chart grant it Secrets and DestinationRules: deleting
		// them without that is forbidden, and every waf-proxy Engine's
		// reconcile and finalizer would fail on it. (Left over from an
		// earlier --operator-name, they are the Engine's: its owner
		// reference lets the garbage collector take them.)
		if r.opts.OperatorName != "" {
			ts = append(ts, target{DestinationRuleGVK, eng.Namespace, name},
				target{corev1.SchemeGroupVersion.WithKind("Secret"), eng.Namespace, CASecretName(eng.Name)})
		}
	}
	if set&proxyObjects != 0 {
		ts = append(ts,
			target{appsv1.SchemeGroupVersion.WithKind("Deployment"), eng.Namespace, name},
			target{corev1.SchemeGroupVersion.WithKind("Service"), eng.Namespace, name},
			target{policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"), eng.Namespace, name},
			target{corev1.SchemeGroupVersion.WithKind("ConfigMap"), eng.Namespace, CAConfigMapName(eng.Name)})
	}
	if set&sharedObjects != 0 {
		ts = append(ts,
			target{networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"), r.opts.Namespace, NetworkPolicyName(eng.Namespace, eng.Name)},
			target{corev1.SchemeGroupVersion.WithKind("ServiceAccount"), eng.Namespace, name})
	}
	var errs []error
	for _, t := range ts {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(t.gvk)
		obj.SetNamespace(t.namespace)
		obj.SetName(t.name)
		err := r.client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
			errs = append(errs, fmt.Errorf("delete %s %s/%s: %w", t.gvk.Kind, t.namespace, t.name, err))
		}
	}
	return errors.Join(errs...)
}

// applyNetworkPolicy lets pods matching from, in the Engine's namespace,
// reach the cache port of Portal's pods. It only adds an allowance: the
// chart's own NetworkPolicy already isolates Portal's pods.
func (r *Reconciler) applyNetworkPolicy(ctx context.Context, eng *wafv1alpha1.Engine, from map[string]string) error {
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(r.opts.CachePort)
	np := &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: networkingv1.SchemeGroupVersion.String(), Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name: NetworkPolicyName(eng.Namespace, eng.Name), Namespace: r.opts.Namespace,
			Labels:      map[string]string{LabelManagedBy: FieldOwner},
			Annotations: map[string]string{AnnotationEngine: eng.Namespace + "/" + eng.Name},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: r.opts.PortalPodLabels},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: eng.Namespace}},
					PodSelector:       &metav1.LabelSelector{MatchLabels: from},
				}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}},
		},
	}
	return r.apply(ctx, np)
}

// applyServiceAccount applies the Engine's ServiceAccount and returns its
// UID (a token is bound to it).
func (r *Reconciler) applyServiceAccount(ctx context.Context, eng *wafv1alpha1.Engine) (*corev1.ServiceAccount, error) {
	f := false
	sa := &corev1.ServiceAccount{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{
			Name: ChildName(eng.Name), Namespace: eng.Namespace, Labels: labels(eng),
			OwnerReferences: []metav1.OwnerReference{ownerRef(eng)},
		},
		AutomountServiceAccountToken: &f,
	}
	if err := r.apply(ctx, sa); err != nil {
		return nil, err
	}
	if err := r.reader.Get(ctx, client.ObjectKeyFromObject(sa), sa); err != nil {
		return nil, fmt.Errorf("read ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	return sa, nil
}

// provisioned is what a driver reports after applying its objects.
type provisioned struct {
	message     string
	requeue     time.Duration
	tokenExpiry *metav1.Time
}

// targetServiceNotFound: the waf-proxy driver has nothing to proxy to.
type targetServiceNotFound struct{ namespace, gateway string }

func (e *targetServiceNotFound) Error() string {
	return fmt.Sprintf("no Service in namespace %s is labelled %s=%s: the waf-proxy driver proxies to the Gateway's Service",
		e.namespace, wafv1alpha1.GatewayNameLabel, e.gateway)
}

// imageNotAllowed: an Engine names an image outside AllowedImages.
type imageNotAllowed struct{ image, field string }

func (e *imageNotAllowed) Error() string {
	return fmt.Sprintf("%s %q is not allowed: Portal deploys only its configured image or images under --waf-engine-allowed-images; ask the platform team, or leave the field empty", e.field, e.image)
}

// checkImage refuses an image the Engine names unless it is Portal's own
// default or under an allowed prefix.
func (r *Reconciler) checkImage(image, def, field string) error {
	if image == "" || image == def {
		return nil
	}
	for _, p := range r.opts.AllowedImages {
		if p != "" && strings.HasPrefix(image, p) {
			return nil
		}
	}
	return &imageNotAllowed{image: image, field: field}
}
