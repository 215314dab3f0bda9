package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/driver"
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

// ChildName is the name of the objects an Engine owns in its namespace:
// waf-engine-<name>. Service names must be DNS labels while Engine names
// may hold dots and run to 253 characters, so such names have their dots
// replaced and are cut to fit, with a hash of the whole name appended so
// two Engines never share a name. A name that already ends as a hashed one
// does ("a-b-2e7336dc8e" would otherwise be "a.b"'s child name) is hashed
// too; apply and teardown also check whose an object is, since a hash
// prefix can be searched for.
func ChildName(engineName string) string {
	const prefix, most = "waf-engine-", 63
	n := prefix + engineName
	if len(n) <= most && !strings.Contains(engineName, ".") && !hashedSuffix.MatchString(engineName) {
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

// hashedSuffix is the end ChildName gives a hashed name.
var hashedSuffix = regexp.MustCompile(`-[0-9a-f]{10}$`)

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
	cur, err := r.current(ctx, u.GroupVersionKind(), u.GetNamespace(), u.GetName())
	if err != nil {
		return err
	}
	if cur != nil && !sameOwner(cur, u) {
		return fmt.Errorf("%s %s/%s belongs to another Engine (%s): Portal does not take it over; rename one of the Engines",
			u.GetKind(), u.GetNamespace(), u.GetName(), ownerOf(cur))
	}
	err = r.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership)
	if meta.IsNoMatchError(err) {
		return fmt.Errorf("%s (%s) is not installed in the cluster", u.GetKind(), u.GroupVersionKind().GroupVersion())
	}
	if err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// sharedObjects are the host's objects for an Engine, whatever its
// driver: the ServiceAccount and the cache NetworkPolicy.
func (r *Reconciler) sharedObjects(eng *wafv1alpha1.Engine) []driver.Object {
	return []driver.Object{
		{GVK: networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"), Namespace: r.opts.Namespace, Name: NetworkPolicyName(eng.Namespace, eng.Name)},
		{GVK: corev1.SchemeGroupVersion.WithKind("ServiceAccount"), Namespace: eng.Namespace, Name: ChildName(eng.Name)},
	}
}

// ownedByOthers is what the registered drivers other than keep own for the
// Engine, less what keep owns too (a driver may reuse another's object).
// An Engine that left a driver leaves nothing of it behind, whichever
// driver it moved to: no driver names another.
func (r *Reconciler) ownedByOthers(eng *wafv1alpha1.Engine, keep driver.Driver) []driver.Object {
	s := r.settings
	var kept []driver.Object
	if keep != nil {
		kept = keep.Owned(s, eng)
	}
	var out []driver.Object
	for _, d := range driver.All() {
		if keep != nil && d.Name() == keep.Name() {
			continue
		}
		for _, o := range d.Owned(s, eng) {
			if !slices.Contains(kept, o) && !slices.Contains(out, o) {
				out = append(out, o)
			}
		}
	}
	return out
}

// everything is all an Engine may have: every driver's objects and the
// shared ones.
func (r *Reconciler) everything(eng *wafv1alpha1.Engine) []driver.Object {
	return append(r.ownedByOthers(eng, nil), r.sharedObjects(eng)...)
}

// teardown deletes eng's objects among objs; absent objects and kinds are
// fine. An object of the same name that another Engine controls is left
// alone: child names are derived from Engine names, and one Engine's name
// must never let it delete another's data plane.
func (r *Reconciler) teardown(ctx context.Context, eng *wafv1alpha1.Engine, objs []driver.Object) error {
	var errs []error
	for _, t := range objs {
		cur, err := r.current(ctx, t.GVK, t.Namespace, t.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if cur == nil {
			continue
		}
		if !ownedBy(cur, eng) {
			r.opts.Logger.Warn("WAF engine teardown: left an object another Engine owns", "engine", eng.Namespace+"/"+eng.Name,
				"kind", t.GVK.Kind, "namespace", t.Namespace, "name", t.Name, "owner", ownerOf(cur))
			continue
		}
		opts := []client.DeleteOption{client.PropagationPolicy(metav1.DeletePropagationBackground)}
		if cur.UID != "" {
			opts = append(opts, client.Preconditions{UID: &cur.UID})
		}
		err = r.client.Delete(ctx, cur, opts...)
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && !meta.IsNoMatchError(err) {
			errs = append(errs, fmt.Errorf("delete %s %s/%s: %w", t.GVK.Kind, t.Namespace, t.Name, err))
		}
	}
	return errors.Join(errs...)
}

// current is the metadata of the object, nil when it (or its kind) does
// not exist. A Secret is not read: Portal may not read Secrets in tenants'
// namespaces, so it is taken as it is named (a metadata-only object of that
// name, whose ownership is not checked).
func (r *Reconciler) current(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*metav1.PartialObjectMetadata, error) {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	if gvk.Group == "" && gvk.Kind == "Secret" {
		obj.SetNamespace(namespace)
		obj.SetName(name)
		return obj, nil
	}
	// Uncached: a one-off read of a kind the controller does not watch.
	err := r.reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj)
	switch {
	case err == nil:
		return obj, nil
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil, nil
	default:
		return nil, fmt.Errorf("read %s %s/%s: %w", gvk.Kind, namespace, name, err)
	}
}

// engineOf names the Engine an object says it belongs to: its controller
// (by UID) in the Engine's namespace, or the AnnotationEngine of an object
// in Portal's namespace. Empty: none (an object from before owner
// references, which teardown and apply still take).
func engineOf(o metav1.Object) string {
	if c := metav1.GetControllerOfNoCopy(o); c != nil && c.Kind == "Engine" {
		return string(c.UID)
	}
	return o.GetAnnotations()[AnnotationEngine]
}

// ownedBy reports whether eng may delete o.
func ownedBy(o metav1.Object, eng *wafv1alpha1.Engine) bool {
	if c := metav1.GetControllerOfNoCopy(o); c != nil && c.Kind == "Engine" {
		return c.UID == eng.UID
	}
	if a, ok := o.GetAnnotations()[AnnotationEngine]; ok {
		return a == eng.Namespace+"/"+eng.Name
	}
	return true
}

// sameOwner reports whether applying want over cur keeps cur's Engine.
func sameOwner(cur, want metav1.Object) bool {
	c := engineOf(cur)
	return c == "" || c == engineOf(want)
}

func ownerOf(o metav1.Object) string {
	if c := metav1.GetControllerOfNoCopy(o); c != nil {
		return c.Kind + " " + c.Name
	}
	return o.GetAnnotations()[AnnotationEngine]
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

// noImage: neither the Engine nor Portal's flags name the data plane's
// image (portal dev without --node, a chart value left empty).
type noImage struct{ what, field, flag string }

func (e *noImage) Error() string {
	return fmt.Sprintf("no %s image: set %s or Portal's %s", e.what, e.field, e.flag)
}

// checkImage refuses an image the Engine names unless it is Portal's own
// default or under an allowed prefix.
func checkImage(s driver.Settings, image, def, field string) error {
	if image == "" || image == def {
		return nil
	}
	for _, p := range s.AllowedImages {
		if p != "" && strings.HasPrefix(image, p) {
			return nil
		}
	}
	return &imageNotAllowed{image: image, field: field}
}
