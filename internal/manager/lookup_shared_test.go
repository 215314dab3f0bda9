package manager

import (
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

// TestLookupBinderAndWatcherShareOneCache: the binder of cluster.* reads
// through the very cache the watcher holds its watches in. Built twice, the
// binder's view holds no watch: every read decodes every object it returns
// again, per evaluation, which the shared cache exists to avoid.
func TestLookupBinderAndWatcherShareOneCache(t *testing.T) {
	cfg := shared.Cluster(t).Config
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	c := Defaults()
	c.Audit.Enabled = true
	reg := prometheus.NewRegistry()
	cc, err := newClusterCache(mgr, &c, reg)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	lk, index, err := newLookups(cfg, cc, &c, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := lk.start(mgr, cfg, engine.New(exprlang.New()), index, &c, reg, log); err != nil {
		t.Fatal(err)
	}
	if lk.binder.Cache() != lk.watcher.Cache() {
		t.Fatal("the lookup binder and watcher hold different caches: the binder's reads miss the watcher's watches")
	}
}
