package certs

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	applyapiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/client/applyconfiguration/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	applyadmissionregistrationv1 "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// target is a kind of object that carries caBundle fields. The injector knows
// nothing else about the object: which webhooks exist, what they match and
// where they point are the business of whoever applies it.
type target interface {
	// gvk is the kind, for the metadata watch and for Events.
	gvk() metav1.TypeMeta
	// newObject returns an empty object of the kind, for a full read.
	newObject() client.Object
	// applyConfig returns the apply configuration that sets every caBundle
	// of obj to bundle, or nil when obj already carries it or has no field
	// for it.
	applyConfig(obj client.Object, bundle []byte) runtime.ApplyConfiguration
}

// injector keeps the caBundle of the named objects of one kind equal to the
// loaded ca.crt. It runs on the leader only.
type injector struct {
	c       *Controller
	t       target
	names   []string
	changed chan event.GenericEvent
}

func newInjector(c *Controller, t target, names []string) *injector {
	// One pending signal is enough: a reconcile reads the newest bundle.
	return &injector{c: c, t: t, names: slices.Clone(names), changed: make(chan event.GenericEvent, 1)}
}

// kick says the CA bundle changed. It never blocks: the loader runs on
// replicas where no injector reads the channel.
func (in *injector) kick() {
	select {
	case in.changed <- event.GenericEvent{}:
	default:
	}
}

func (in *injector) setup(mgr ctrl.Manager) error {
	meta := &metav1.PartialObjectMetadata{TypeMeta: in.t.gvk()}
	named := predicate.NewTypedPredicateFuncs(func(o *metav1.PartialObjectMetadata) bool {
		return slices.Contains(in.names, o.GetName())
	})
	all := handler.Funcs{GenericFunc: func(_ context.Context, _ event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, n := range in.names {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: n}})
		}
	}}
	return ctrl.NewControllerManagedBy(mgr).
		Named(in.c.opts.ControllerName + "-inject-" + strings.ToLower(in.t.gvk().Kind)).
		// The metadata watch fires when a target is created, recreated or
		// edited (say, a Helm upgrade that blanks the caBundle).
		WatchesRawSource(source.Kind(in.c.cache, meta, &handler.TypedEnqueueRequestForObject[*metav1.PartialObjectMetadata]{}, named)).
		WatchesRawSource(source.Channel(in.changed, all)).
		Complete(reconcile.Func(in.reconcile))
}

func (in *injector) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	bundle := in.c.CABundle()
	if len(bundle) == 0 {
		// Nothing loaded yet, or a cert-manager Secret without ca.crt; the
		// loader kicks again when a bundle arrives.
		in.c.log.Info("no CA bundle to inject yet", "kind", in.t.gvk().Kind, "name", req.Name)
		return reconcile.Result{}, nil
	}
	obj := in.t.newObject()
	if err := in.c.client.Get(ctx, req.NamespacedName, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ac := in.t.applyConfig(obj, bundle)
	if ac == nil {
		return reconcile.Result{}, nil
	}
	if err := in.c.client.Apply(ctx, ac, client.FieldOwner(InjectorFieldOwner), client.ForceOwnership); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("inject caBundle into %s %s: %w", in.t.gvk().Kind, req.Name, err)
	}
	msg := fmt.Sprintf("caBundle set from Secret %s (%d bytes)", in.c.secretKey(), len(bundle))
	in.c.log.Info("caBundle injected", "kind", in.t.gvk().Kind, "name", req.Name)
	// Events resolve the object's kind from its TypeMeta, not the
	// manager's scheme, which may not know CRDs.
	regarding := obj.DeepCopyObject().(client.Object)
	tm := in.t.gvk()
	regarding.GetObjectKind().SetGroupVersionKind(tm.GroupVersionKind())
	in.c.recorder.Eventf(regarding, nil, corev1.EventTypeNormal, ReasonCABundleUpdated, "Inject", "%s", msg)
	return reconcile.Result{}, nil
}

// vwcTarget: every webhooks[*].clientConfig.caBundle of a
// ValidatingWebhookConfiguration.
type vwcTarget struct{}

func (vwcTarget) gvk() metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: admissionregistrationv1.SchemeGroupVersion.String(), Kind: "ValidatingWebhookConfiguration"}
}

func (vwcTarget) newObject() client.Object {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{}
}

func (vwcTarget) applyConfig(obj client.Object, bundle []byte) runtime.ApplyConfiguration {
	vwc := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration)
	stale := slices.ContainsFunc(vwc.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) bool {
		return !bytes.Equal(w.ClientConfig.CABundle, bundle)
	})
	if !stale {
		return nil
	}
	ac := applyadmissionregistrationv1.ValidatingWebhookConfiguration(vwc.Name)
	for _, w := range vwc.Webhooks {
		// The name is the list key: the apply touches these webhooks' caBundle only.
		ac.WithWebhooks(applyadmissionregistrationv1.ValidatingWebhook().WithName(w.Name).
			WithClientConfig(applyadmissionregistrationv1.WebhookClientConfig().WithCABundle(bundle...)))
	}
	return ac
}

// crdTarget: spec.conversion.webhook.clientConfig.caBundle of a CRD whose
// conversion strategy is Webhook; other CRDs are left alone.
type crdTarget struct{}

func (crdTarget) gvk() metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "CustomResourceDefinition"}
}

func (crdTarget) newObject() client.Object { return &apiextensionsv1.CustomResourceDefinition{} }

func (crdTarget) applyConfig(obj client.Object, bundle []byte) runtime.ApplyConfiguration {
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	conv := crd.Spec.Conversion
	if conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter || conv.Webhook == nil || conv.Webhook.ClientConfig == nil {
		return nil
	}
	if bytes.Equal(conv.Webhook.ClientConfig.CABundle, bundle) {
		return nil
	}
	return applyapiextensionsv1.CustomResourceDefinition(crd.Name).WithSpec(
		applyapiextensionsv1.CustomResourceDefinitionSpec().WithConversion(
			applyapiextensionsv1.CustomResourceConversion().WithWebhook(
				applyapiextensionsv1.WebhookConversion().WithClientConfig(
					applyapiextensionsv1.WebhookClientConfig().WithCABundle(bundle...)))))
}
