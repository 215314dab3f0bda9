package certs

import (
	"bytes"
	"context"
	"crypto/x509"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/pki"
)

var localhost = []net.IP{net.ParseIP("127.0.0.1")}

func selfOptions(ns string) Options {
	return Options{Namespace: ns, DNSNames: ServiceDNSNames("portal-webhook", ns), IPAddresses: localhost}
}

// createVWC creates a ValidatingWebhookConfiguration with two webhooks: one
// sending CREATEs of ConfigMaps in ns to url (fail closed), one matching
// nothing. caBundle may be nil.
func createVWC(t *testing.T, ns, url string, caBundle []byte) {
	t.Helper()
	name := vwcName(ns)
	hook := func(name, resource string) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{
			Name:         name,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{resource}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](5),
		}
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{hook("configmaps.certs.portal.io", "configmaps"), hook("none.certs.portal.io", "replicationcontrollers")},
	}
	if err := env.client.Create(context.Background(), vwc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.Delete(context.Background(), vwc) })
}

func vwcName(ns string) string { return "certs-test-" + ns }

// createConversionCRD creates a CRD with a conversion webhook that is never
// called (one version), to receive a caBundle.
func createConversionCRD(t *testing.T, ns string) string {
	t.Helper()
	group := ns + ".certs.portal.io"
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
			Conversion: &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/convert")},
					ConversionReviewVersions: []string{"v1"},
				},
			},
		},
	}
	if err := env.client.Create(context.Background(), crd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.Delete(context.Background(), crd) })
	return crd.Name
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// vwcBundlesEqual reports whether every webhook of the VWC carries want.
func vwcBundlesEqual(t *testing.T, name string, want []byte) bool {
	t.Helper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.client.Get(context.Background(), client.ObjectKey{Name: name}, vwc); err != nil {
		t.Fatal(err)
	}
	return len(want) > 0 && !slices.ContainsFunc(vwc.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) bool {
		return !bytes.Equal(w.ClientConfig.CABundle, want)
	})
}

// createConfigMap goes through the test webhook.
func createConfigMap(ns string) error {
	return env.client.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "cm-", Namespace: ns}})
}

// admitsThroughWebhook reports whether a ConfigMap create succeeded and
// went through the webhook. A create that succeeds proves nothing alone: the
// API server acts on a new webhook configuration only once its informer has
// seen it, and admits without calling the webhook before.
func admitsThroughWebhook(ns string, calls *atomic.Int64) bool {
	before := calls.Load()
	return createConfigMap(ns) == nil && calls.Load() > before
}

// loadLoop creates ConfigMaps through the webhook until stopped or max is
// reached, counting failures; stop returns (requests, failures).
func loadLoop(t *testing.T, ns string, max int) (stop func() (int, int)) {
	var requests, failures atomic.Int64
	var firstErr atomic.Value
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < max; i++ {
			select {
			case <-quit:
				return
			default:
			}
			requests.Add(1)
			if err := createConfigMap(ns); err != nil {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
		}
	})
	return func() (int, int) {
		close(quit)
		wg.Wait()
		if e := firstErr.Load(); e != nil {
			t.Logf("first failure: %v", e)
		}
		return int(requests.Load()), int(failures.Load())
	}
}

func verifyHosts(t *testing.T, b *pki.Bundle, hosts ...string) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(b.CABundle())
	for _, h := range hosts {
		if _, err := b.Serving.Leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: roots}); err != nil {
			t.Errorf("serving certificate for %s: %v", h, err)
		}
	}
}

func TestIssueServeAndInject(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	crd := createConversionCRD(t, ns)
	opts := selfOptions(ns)
	vwc := vwcName(ns)
	opts.WebhookConfigurations, opts.ConversionCRDs = []string{vwc}, []string{crd}
	r := start(t, opts, "")
	url, calls := webhookServer(t, r.c)
	// Created after the controller started: the watch must find it.
	createVWC(t, ns, url, nil)

	eventually(t, "Ready", r.c.Ready)
	b := secretBundle(t, ns)
	if b == nil {
		t.Fatal("no servable Secret")
	}
	sec, _ := getSecret(t, ns)
	if sec.Type != corev1.SecretTypeTLS || len(sec.Data[pki.KeyCAKey]) == 0 {
		t.Errorf("Secret type %q, keys %v; want kubernetes.io/tls with ca.key", sec.Type, keys(sec.Data))
	}
	// Created (create-if-absent, so one CA wins a race between replicas);
	// renewals apply under the same field owner.
	if !slices.ContainsFunc(sec.ManagedFields, func(m metav1.ManagedFieldsEntry) bool { return m.Manager == FieldOwner }) {
		t.Errorf("Secret not written by field owner %q: %+v", FieldOwner, sec.ManagedFields)
	}
	verifyHosts(t, b, append([]string{"127.0.0.1"}, opts.DNSNames...)...)
	eventually(t, "the Secret's certificate served", func() bool { return b.Serving.Leaf.Equal(r.served()) })
	if !bytes.Equal(r.c.CABundle(), sec.Data[pki.KeyCABundle]) {
		t.Error("CABundle() differs from ca.crt")
	}

	eventually(t, "caBundle injected into every webhook", func() bool { return vwcBundlesEqual(t, vwc, r.c.CABundle()) })
	eventually(t, "caBundle injected into the conversion webhook", func() bool {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.client.Get(ctx, client.ObjectKey{Name: crd}, got); err != nil {
			t.Fatal(err)
		}
		return bytes.Equal(got.Spec.Conversion.Webhook.ClientConfig.CABundle, r.c.CABundle())
	})
	eventually(t, "the API server calls the webhook over TLS", func() bool { return admitsThroughWebhook(ns, calls) })

	// A recreated VWC (say, by a Helm upgrade) gets the caBundle again.
	if err := env.client.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: vwc}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "VWC gone", func() bool {
		err := env.client.Get(ctx, client.ObjectKey{Name: vwc}, &admissionregistrationv1.ValidatingWebhookConfiguration{})
		return apierrors.IsNotFound(err)
	})
	createVWC(t, ns, url, nil)
	eventually(t, "caBundle injected into the recreated VWC", func() bool { return vwcBundlesEqual(t, vwc, r.c.CABundle()) })

	if got, want := testutil.ToFloat64(r.metrics.Expiry), float64(b.Serving.Leaf.NotAfter.Unix()); got != want {
		t.Errorf("portal_cert_expiry_timestamp_seconds = %v, want %v", got, want)
	}
	if got := testutil.ToFloat64(r.metrics.Renewals); got != 1 {
		t.Errorf("portal_cert_renewals_total = %v, want 1", got)
	}
	eventually(t, "Event "+ReasonIssued, func() bool { return hasEvent(t, ns, DefaultSecretName, ReasonIssued) })
}
