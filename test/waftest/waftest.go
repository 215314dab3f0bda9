// Package waftest runs the WAF rule layer, as `portal run --waf` wires it,
// against a test control plane, for the tests of every package that needs
// RuleSets compiled and served.
package waftest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/certs"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/waf"
	"github.com/vilaca/portal/internal/waf/cache"
)

// Namespace is Portal's namespace in the test control plane.
const Namespace = "portal-system"

// Reader is the ServiceAccount (in Namespace) whose token Env.Cache sends:
// RBAC grants it get on rulesets/cache in every namespace, the grant a
// platform team gives a shared data plane.
const Reader = "waf-cache-reader"

// Env is a running WAF layer: the client to create rule objects with, the
// layer itself, a client of its cache server (TLS, verified against the
// layer's CA, with Reader's token) and the registry its metrics go to.
type Env struct {
	Client client.Client
	Kube   kubernetes.Interface
	Layer  *waf.Layer
	// Certs issues and serves the cache's certificate.
	Certs    *certs.Controller
	Cache    *cache.Client
	Registry *prometheus.Registry
	// URL is the cache server's base URL, https://127.0.0.1:PORT.
	URL string
}

// Start runs the WAF layer against cl with its cache server on a free port of
// 127.0.0.1, and returns once the server listens with its certificate. stop
// ends it.
func Start(cl *devcluster.Cluster, log *slog.Logger) (env *Env, stop func() error, err error) {
	return StartWith(cl, log, nil)
}

// StartWith is Start with the layer's options changed by configure (nil:
// none) before the layer is set up.
func StartWith(cl *devcluster.Cluster, log *slog.Logger, configure func(*waf.Options)) (env *Env, stop func() error, err error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, wafv1alpha1.AddToScheme, gatewayv1.Install} {
		if err := add(scheme); err != nil {
			return nil, nil, err
		}
	}
	env = &Env{Registry: prometheus.NewRegistry()}
	if env.Client, err = client.New(cl.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, nil, err
	}
	if env.Kube, err = kubernetes.NewForConfig(cl.Config); err != nil {
		return nil, nil, err
	}
	ctx := context.Background()
	if err := env.setupReader(ctx); err != nil {
		return nil, nil, err
	}
	mgr, err := devtest.NewManager(cl, scheme)
	if err != nil {
		return nil, nil, err
	}
	opts := waf.DefaultOptions()
	opts.Namespace = Namespace
	opts.CacheAddr = "127.0.0.1:0"
	opts.Logger = log
	opts.Registerer = env.Registry
	if env.Certs, err = certs.Setup(mgr, certs.CacheOptions(Namespace, opts.CacheService, opts.CacheCertSecret, log, env.Registry), "waf-cache-certificate"); err != nil {
		return nil, nil, err
	}
	opts.Certificates = env.Certs
	if configure != nil {
		configure(&opts)
	}
	if env.Layer, err = waf.Setup(mgr, opts); err != nil {
		return nil, nil, err
	}
	stop = devtest.Run(mgr)
	select {
	case <-env.Layer.Server.Ready():
	case <-time.After(time.Minute):
		return nil, nil, errors.Join(errors.New("cache server did not start"), stop())
	}
	env.URL = "https://" + env.Layer.Server.Addr()
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return env.Certs.Ready(), nil
	})
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("cache serving certificate not loaded: %w", err), stop())
	}
	token, err := env.Token(ctx, Namespace, Reader, cache.Audience)
	if err != nil {
		return nil, nil, errors.Join(err, stop())
	}
	if env.Cache, err = env.NewClient(token); err != nil {
		return nil, nil, errors.Join(err, stop())
	}
	return env, stop, nil
}

// setupReader creates Namespace, Reader and the RBAC that lets Reader read
// every namespace's rule sets.
func (e *Env) setupReader(ctx context.Context) error {
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}},
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: Reader},
			Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{cache.GrantGroup}, Resources: []string{cache.GrantResource + "/" + cache.GrantSubresource},
				Verbs: []string{cache.GrantVerb},
			}},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: Reader},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: Reader},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: Namespace, Name: Reader}},
		},
	}
	for _, o := range objs {
		if err := e.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// Token returns a token of ServiceAccount namespace/name for audiences,
// creating the ServiceAccount (and its namespace) when missing: what a
// projected token volume gives a pod.
func (e *Env) Token(ctx context.Context, namespace, name string, audiences ...string) (string, error) {
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}},
	} {
		if err := e.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("create %T %s: %w", o, name, err)
		}
	}
	tr, err := e.Kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token request for %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// NewClient returns a cache client that trusts the layer's CA and sends
// token.
func (e *Env) NewClient(token string) (*cache.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(e.Layer.Certs.CABundle()) {
		return nil, errors.New("the cache certificate controller has no CA bundle")
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	c, err := cache.NewClient(e.URL, &http.Client{Transport: t, Timeout: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	c.Token = func() (string, error) { return token, nil }
	return c, nil
}
