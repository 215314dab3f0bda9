package certs

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	applycorev1 "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/vilaca/portal/internal/pki"
)

// SetupWithManager registers the loader (every replica), the issuer (leader,
// self source only) and the caBundle injectors (leader) with mgr. Call it
// once per Controller.
//
// The controller brings its own client and a cache that holds only the one
// Secret and the metadata of the injection targets, so it needs no scheme
// entries from the caller and RBAC on Secrets in its own namespace only.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	// Only the groups it reads and writes: a scheme of every built-in
	// group (client-go's) holds half a megabyte for the process's life.
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, admissionregistrationv1.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	cl, err := client.New(mgr.GetConfig(), client.Options{
		Scheme: scheme, HTTPClient: mgr.GetHTTPClient(), Mapper: mgr.GetRESTMapper(),
	})
	if err != nil {
		return fmt.Errorf("certs: client: %w", err)
	}
	ca, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: scheme, HTTPClient: mgr.GetHTTPClient(), Mapper: mgr.GetRESTMapper(),
		DefaultTransform: slim,
		ByObject: map[client.Object]cache.ByObject{&corev1.Secret{}: {
			Namespaces: map[string]cache.Config{c.opts.Namespace: {}},
			Field:      fields.OneTermEqualSelector("metadata.name", c.opts.SecretName),
		}},
	})
	if err != nil {
		return fmt.Errorf("certs: cache: %w", err)
	}
	// As a hasCache runnable the cache starts on every replica, before the
	// controllers, whether or not this replica leads.
	if err := mgr.Add(ownCache{ca}); err != nil {
		return err
	}
	c.client, c.cache, c.recorder = cl, ca, mgr.GetEventRecorder(FieldOwner)

	if err := c.setupLoader(mgr); err != nil {
		return err
	}
	if c.opts.Source == SourceSelf {
		if err := c.setupIssuer(mgr); err != nil {
			return err
		}
	}
	for _, in := range c.injectors {
		if err := in.setup(mgr); err != nil {
			return err
		}
	}
	return nil
}

// ownCache lets the manager start a private cache with its caches.
type ownCache struct{ cache.Cache }

func (o ownCache) GetCache() cache.Cache { return o.Cache }

// slim drops what the controller never reads from cached objects: managed
// fields everywhere, and annotations of the metadata-only targets (a CRD's
// last-applied-configuration annotation is the whole CRD).
func slim(in any) (any, error) {
	if o, ok := in.(metav1.Object); ok {
		o.SetManagedFields(nil)
		if _, isMeta := in.(*metav1.PartialObjectMetadata); isMeta {
			o.SetAnnotations(nil)
		}
	}
	return in, nil
}

func (c *Controller) secretKey() types.NamespacedName {
	return types.NamespacedName{Namespace: c.opts.Namespace, Name: c.opts.SecretName}
}

func (c *Controller) secretSource() source.Source {
	return source.Kind(c.cache, &corev1.Secret{}, &handler.TypedEnqueueRequestForObject[*corev1.Secret]{})
}

// startKick enqueues the Secret once when the controller starts: the watch
// says nothing about a Secret that does not exist.
func (c *Controller) startKick() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.Add(reconcile.Request{NamespacedName: c.secretKey()})
		return nil
	})
}

func (c *Controller) setupLoader(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(c.opts.ControllerName + "-loader").
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false)}).
		WatchesRawSource(c.secretSource()).
		WatchesRawSource(c.startKick()).
		Complete(reconcile.Func(c.load))
}

// load swaps in the certificate the Secret holds. A missing or broken Secret
// leaves the last good certificate in place: serving a valid certificate
// beats serving none while the Secret is repaired.
func (c *Controller) load(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	sec := &corev1.Secret{}
	if err := c.cache.Get(ctx, c.secretKey(), sec); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		if c.opts.Source == SourceSelf && c.current.Load() == nil {
			return reconcile.Result{}, c.bootstrap(ctx)
		}
		c.log.Info("certificate Secret not found; serving the last loaded certificate, if any", "loaded", c.current.Load() != nil)
		return reconcile.Result{}, nil
	}
	b, err := pki.Parse(sec.Data)
	if err != nil {
		c.invalid(sec, err)
		return reconcile.Result{}, nil
	}
	if err := b.Verify(c.clock.Now()); err != nil && c.opts.Source == SourceCertManager && len(b.CAs) > 0 {
		c.invalid(sec, fmt.Errorf("the serving certificate does not verify against %s (loaded anyway): %w", pki.KeyCABundle, err))
	}
	c.swap(b)
	return reconcile.Result{}, nil
}

// swap makes b the served certificate: handshakes from now on get it.
func (c *Controller) swap(b *pki.Bundle) {
	next := &loaded{bundle: b, caPEM: b.CABundle()}
	prev := c.current.Swap(next)
	leaf := b.Serving.Leaf
	c.metrics.Expiry.Set(float64(leaf.NotAfter.Unix()))
	if prev == nil || !prev.bundle.Serving.Leaf.Equal(leaf) {
		c.log.Info("serving certificate loaded", "serial", leaf.SerialNumber.Text(16),
			"notAfter", leaf.NotAfter.Format(time.RFC3339), "issuer", leaf.Issuer.CommonName, "cas", len(b.CAs))
	}
	if prev == nil || !bytes.Equal(prev.caPEM, next.caPEM) {
		for _, in := range c.injectors {
			in.kick()
		}
	}
}

// invalid reports a Secret the loader cannot use. In self mode the leader's
// issuer replaces it and reports that, so a log line is enough here; with
// cert-manager nobody in Portal can fix it, so it is an Event too.
func (c *Controller) invalid(sec *corev1.Secret, err error) {
	if c.opts.Source == SourceSelf {
		c.log.Info("certificate Secret is unusable; the leader replaces it", "error", err.Error())
		return
	}
	c.log.Error("certificate Secret is unusable; still serving the last loaded certificate, if any",
		"error", err.Error(), "loaded", c.current.Load() != nil)
	c.recorder.Eventf(sec, nil, corev1.EventTypeWarning, ReasonInvalid, "Load", "%s", err.Error())
}

// bootstrap creates the missing Secret from a replica that serves nothing
// yet, leader or not (self source). The leader may be a replica that does
// not run this certificate's layer at all: one started before the layer
// was turned on by a rolling upgrade, which waits for this replica's
// readiness before it stops the leader. Waiting for the leader would stall
// that rollout. Create fails when another replica was first, so exactly
// one CA wins; renewals and rotations stay with the leader's issuer.
func (c *Controller) bootstrap(ctx context.Context) error {
	now := c.clock.Now()
	b := &pki.Bundle{}
	data, err := c.policy.Issue(now, b, c.policy.Decide(now, b))
	if err != nil {
		return err
	}
	written, err := c.createSecret(ctx, data)
	switch {
	case apierrors.IsAlreadyExists(err):
		// Another replica created it; the watch brings it here.
		return nil
	case err != nil:
		return fmt.Errorf("create certificate Secret %s: %w", c.secretKey(), err)
	}
	c.metrics.Renewals.Inc()
	c.log.Info("certificate Secret created by a replica with no certificate", "reason", ReasonIssued)
	c.recorder.Eventf(written, nil, corev1.EventTypeNormal, ReasonIssued, "Issue", "%s", "no certificate Secret: issued a new CA and serving certificate")
	return nil
}

func (c *Controller) setupIssuer(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(c.opts.ControllerName + "-issuer").
		WatchesRawSource(c.secretSource()).
		WatchesRawSource(c.startKick()).
		Complete(reconcile.Func(c.issue))
}

// issue creates, renews or repairs the Secret (self source, leader only).
func (c *Controller) issue(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	now := c.clock.Now()
	sec := &corev1.Secret{}
	err := c.client.Get(ctx, c.secretKey(), sec)
	var b *pki.Bundle
	switch {
	case apierrors.IsNotFound(err):
		// Deleted (a forced rotation) or never created. The CAs this replica
		// still trusts stay in the new bundle, so replicas that still serve
		// the old certificate keep working while the new one spreads.
		b = &pki.Bundle{}
		if cur := c.current.Load(); cur != nil {
			b.CAs = cur.bundle.CAs
		}
		sec = nil
	case err != nil:
		return reconcile.Result{}, err
	case sec.Type != corev1.SecretTypeTLS:
		return reconcile.Result{}, c.replace(ctx, sec)
	default:
		b = pki.Read(sec.Data)
	}
	pl := c.policy.Decide(now, b)
	if !pl.Changes() {
		return reconcile.Result{RequeueAfter: c.requeueAfter(now, pl.Next)}, nil
	}
	data, err := c.policy.Issue(now, b, pl)
	if err != nil {
		return reconcile.Result{}, err
	}
	if sec != nil && pki.SameData(sec.Data, data) {
		return reconcile.Result{RequeueAfter: c.opts.CheckInterval}, nil
	}
	var written *corev1.Secret
	if sec == nil {
		// Create, not apply: a replica bootstrapping the Secret may have
		// been first, and its CA must not be overwritten by a second one.
		written, err = c.createSecret(ctx, data)
		if apierrors.IsAlreadyExists(err) {
			return reconcile.Result{}, nil // the watch brings the winner's Secret
		}
	} else {
		written, err = c.writeSecret(ctx, data)
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("write certificate Secret %s: %w", c.secretKey(), err)
	}
	c.metrics.Renewals.Inc()
	reason := ReasonRenewed
	if sec == nil {
		reason = ReasonIssued
	}
	msg := strings.Join(pl.Why, "; ")
	c.log.Info("certificate Secret written", "reason", reason, "why", msg)
	c.recorder.Eventf(written, nil, corev1.EventTypeNormal, reason, "Issue", "%s", msg)
	// The write comes back through the watch, which plans the next step.
	return reconcile.Result{}, nil
}

func (c *Controller) writeSecret(ctx context.Context, data map[string][]byte) (*corev1.Secret, error) {
	ac := applycorev1.Secret(c.opts.SecretName, c.opts.Namespace).
		WithType(corev1.SecretTypeTLS).
		WithLabels(map[string]string{"app.kubernetes.io/managed-by": FieldOwner}).
		WithData(data)
	if err := c.client.Apply(ctx, ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return nil, err
	}
	written := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: c.opts.SecretName, Namespace: c.opts.Namespace}}
	if ac.UID != nil {
		written.UID = *ac.UID
	}
	return written, nil
}

// createSecret creates the Secret with data; it fails with AlreadyExists
// when the Secret exists, whoever wrote it.
func (c *Controller) createSecret(ctx context.Context, data map[string][]byte) (*corev1.Secret, error) {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: c.opts.SecretName, Namespace: c.opts.Namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": FieldOwner},
		},
		Type: corev1.SecretTypeTLS,
		Data: data,
	}
	if err := c.client.Create(ctx, sec, client.FieldOwner(FieldOwner)); err != nil {
		return nil, err
	}
	return sec, nil
}

// replace deletes a Secret of the wrong type (a Secret's type cannot change)
// so the next look creates a kubernetes.io/tls one. The UID precondition
// keeps it from deleting a Secret someone recreated meanwhile.
func (c *Controller) replace(ctx context.Context, sec *corev1.Secret) error {
	msg := fmt.Sprintf("Secret has type %q, not %q; deleting it to recreate it", sec.Type, corev1.SecretTypeTLS)
	c.log.Info(msg)
	c.recorder.Eventf(sec, nil, corev1.EventTypeWarning, ReasonReplaced, "Issue", "%s", msg)
	err := c.client.Delete(ctx, sec, client.Preconditions{UID: &sec.UID})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete certificate Secret %s: %w", c.secretKey(), err)
	}
	return nil
}

// requeueAfter is how long until the next planned look: the next rotation
// step or renewal, at most CheckInterval, and never a busy loop.
func (c *Controller) requeueAfter(now, next time.Time) time.Duration {
	d := c.opts.CheckInterval
	if !next.IsZero() && next.Sub(now) < d {
		d = next.Sub(now)
	}
	return max(d, time.Second)
}

// Setup creates a certificate controller with opts, adds it to mgr, and
// registers its readiness under readyzName: what every server that presents
// one of Portal's certificates needs.
func Setup(mgr ctrl.Manager, opts Options, readyzName string) (*Controller, error) {
	c, err := New(opts)
	if err != nil {
		return nil, err
	}
	if err := c.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck(readyzName, c.Check); err != nil {
		return nil, err
	}
	return c, nil
}

// CacheOptions are the options of the WAF rule set cache's certificate: its
// own CA and Secret in Portal's namespace, for the cache's Service names and
// 127.0.0.1, with metrics of their own. The manager and the WAF tests share
// them.
func CacheOptions(namespace, service, secret string, log *slog.Logger, reg prometheus.Registerer) Options {
	return Options{
		Namespace:      namespace,
		SecretName:     secret,
		ControllerName: "waf-cache-certs",
		DNSNames:       ServiceDNSNames(service, namespace),
		IPAddresses:    []net.IP{net.IPv4(127, 0, 0, 1)},
		Log:            log,
		Metrics:        NewNamedMetrics(reg, "portal_waf_cache_cert", "rule set cache"),
	}
}
