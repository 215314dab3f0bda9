// Package waftest runs the WAF rule layer, as `portal run --waf` wires it,
// against a test control plane, for the tests of every package that needs
// RuleSets compiled and served.
package waftest

import (
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/waf"
	"github.com/vilaca/portal/internal/waf/cache"
)

// Env is a running WAF layer: the client to create rule objects with, the
// layer itself, a client of its cache server and the registry its metrics
// go to.
type Env struct {
	Client   client.Client
	Layer    *waf.Layer
	Cache    *cache.Client
	Registry *prometheus.Registry
}

// Start runs the WAF layer against cl with its cache server on a free port of
// 127.0.0.1, and returns once the server listens. stop ends it.
func Start(cl *devcluster.Cluster, log *slog.Logger) (env *Env, stop func() error, err error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, wafv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, nil, err
		}
	}
	mgr, err := devtest.NewManager(cl, scheme)
	if err != nil {
		return nil, nil, err
	}
	env = &Env{Registry: prometheus.NewRegistry()}
	opts := waf.DefaultOptions()
	opts.CacheAddr = "127.0.0.1:0"
	opts.Logger = log
	opts.Registerer = env.Registry
	if env.Layer, err = waf.Setup(mgr, opts); err != nil {
		return nil, nil, err
	}
	stop = devtest.Run(mgr)
	select {
	case <-env.Layer.Server.Ready():
	case <-time.After(time.Minute):
		return nil, nil, errors.Join(errors.New("cache server did not start"), stop())
	}
	if env.Cache, err = cache.NewClient("http://"+env.Layer.Server.Addr(), nil); err != nil {
		return nil, nil, errors.Join(err, stop())
	}
	if env.Client, err = client.New(cl.Config, client.Options{Scheme: scheme}); err != nil {
		return nil, nil, errors.Join(err, stop())
	}
	return env, stop, nil
}
