package audit_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	amsink "github.com/vilaca/portal/internal/sink/alertmanager"
	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
)

// Alertmanager stopped for a while, then started again: every finding
// raised meanwhile arrives, and the one resolved meanwhile stays resolved.
func TestAlertmanagerOutage(t *testing.T) {
	c := cluster(t)
	am := amtest.Start(t)
	ns := namespace(t, c, "amdown")
	inst := startInstance(t, instanceOptions{
		rules: podRule("audit-privileged", ns, privileged, "container {{ container.name }} is privileged"),
		am:    am,
		amOptions: func(o *amsink.Options) {
			o.MinBackoff, o.MaxBackoff = 50*time.Millisecond, 500*time.Millisecond
		},
	})
	create(t, c, pod(ns, "p1", true, nil))
	waitAlerts(t, am, ns, "first alert", func(a map[string]int) bool { return a["audit-privileged/p1/c"] == 1 })

	am.Stop()
	var want []string
	for i := 2; i <= 6; i++ {
		create(t, c, pod(ns, fmt.Sprintf("p%d", i), true, nil))
		want = append(want, fmt.Sprintf("audit-privileged/p%d/c", i))
	}
	if err := c.Delete(context.Background(), pod(ns, "p1", true, nil)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "changes buffered while Alertmanager is down", func() (bool, error) {
		return inst.metric(t, "portal_alertmanager_pending_alerts", nil) == 6 &&
			inst.metric(t, "portal_alertmanager_send_failures_total", nil) > 0, nil
	})

	if err := am.Start(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	waitAlerts(t, am, ns, "buffered alerts delivered", func(a map[string]int) bool {
		return slices.Equal(slices.Sorted(maps.Keys(a)), want)
	})
	t.Logf("buffered alerts delivered %v after Alertmanager came back", time.Since(restarted))
	if n := inst.metric(t, "portal_alertmanager_alerts_dropped_total", nil); n != 0 {
		t.Errorf("%v alert changes dropped", n)
	}
	eventually(t, 10*time.Second, "buffer drained", func() (bool, error) {
		return inst.metric(t, "portal_alertmanager_pending_alerts", nil) == 0, nil
	})
}

// Two instances against one API server: exactly one holds the Lease and
// writes; stopped, the other takes over within 15 s and carries on with no
// result written twice and no alert duplicated.
func TestLeaderElection(t *testing.T) {
	c := cluster(t)
	am := shared(t)
	ns := namespace(t, c, "ha")
	rules := podRule("audit-privileged", ns, privileged, "container {{ container.name }} is privileged")
	o := instanceOptions{rules: rules, am: am, leaderID: "portal-audit-" + ns}
	a, b := startInstance(t, o), startInstance(t, o)
	var leader, follower *instance
	eventually(t, 30*time.Second, "a leader", func() (bool, error) {
		switch {
		case a.leader(t):
			leader, follower = a, b
		case b.leader(t):
			leader, follower = b, a
		}
		return leader != nil, nil
	})
	for i := 1; i <= 5; i++ {
		create(t, c, pod(ns, fmt.Sprintf("v%d", i), true, nil))
	}
	waitReport(t, c, ns, "leader's report", func(st reportState) bool { return len(st.results) == 5 && st.fail == 5 })
	waitAlerts(t, am, ns, "leader's alerts", func(a map[string]int) bool { return len(a) == 5 })
	for _, m := range []string{"portal_policyreport_writes_total", "portal_alertmanager_alerts_sent_total"} {
		if n := follower.metric(t, m, nil); n != 0 {
			t.Errorf("the follower wrote: %s = %v", m, n)
		}
		if n := leader.metric(t, m, nil); n == 0 {
			t.Errorf("the leader did not write: %s = 0", m)
		}
	}
	if follower.leader(t) {
		t.Fatal("both instances lead")
	}

	stopped := time.Now()
	leader.stop(t)
	eventually(t, 15*time.Second, "the follower takes over", func() (bool, error) { return follower.leader(t), nil })
	t.Logf("takeover %v after the leader stopped", time.Since(stopped))

	for i := 6; i <= 8; i++ {
		create(t, c, pod(ns, fmt.Sprintf("v%d", i), true, nil))
	}
	if err := c.Delete(context.Background(), pod(ns, "v1", true, nil)); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 2; i <= 8; i++ {
		want = append(want, fmt.Sprintf("audit-privileged/v%d/c", i))
	}
	st := waitReport(t, c, ns, "new leader's report", func(st reportState) bool {
		return slices.Equal(slices.Sorted(maps.Keys(st.results)), want) && st.fail == len(want)
	})
	if len(st.reports) != 1 {
		t.Errorf("%d reports for %d results, want 1", len(st.reports), len(want))
	}
	waitAlerts(t, am, ns, "new leader's alerts", func(a map[string]int) bool {
		return slices.Equal(slices.Sorted(maps.Keys(a)), want)
	})
}

// Killing the informers' connections is recovered by the watch, not by the
// resync (one hour here): the reconnect counter moves and a change made
// afterwards reaches the report at once.
func TestWatchReconnect(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c, "reconnect")
	d := &trackingDialer{}
	cfg := rest.CopyConfig(env.cfg)
	cfg.Dial = d.DialContext
	inst := startInstance(t, instanceOptions{rules: podRule("audit-privileged", ns, privileged, "privileged"), restConfig: cfg})
	create(t, c, pod(ns, "before", true, nil))
	waitReport(t, c, ns, "first finding", func(st reportState) bool { return st.has("audit-privileged/before/c") })

	if n := d.closeAll(); n == 0 {
		t.Fatal("no informer connection to close")
	}
	eventually(t, 30*time.Second, "watch reconnect counted", func() (bool, error) {
		return inst.metric(t, "portal_cluster_cache_watch_reconnects_total", map[string]string{"resource": "pods"}) > 0, nil
	})
	// The resync is an hour away: only the reconnected watch can carry the
	// change to the report. (How fast it does is a benchmark's question.)
	create(t, c, pod(ns, "after", true, nil))
	waitReport(t, c, ns, "finding after the reconnect", func(st reportState) bool { return st.has("audit-privileged/after/c") })
	if n := inst.metric(t, "portal_audit_resyncs_total", nil); n != 0 {
		t.Errorf("portal_audit_resyncs_total = %v: the resync ran, so the watch was not proven", n)
	}
}

// trackingDialer dials TCP and can close every connection it made.
type trackingDialer struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (d *trackingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		d.mu.Lock()
		d.conns = append(d.conns, conn)
		d.mu.Unlock()
	}
	return conn, err
}

func (d *trackingDialer) closeAll() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		_ = c.Close()
	}
	n := len(d.conns)
	d.conns = nil
	return n
}

// The periodic resync re-evaluates every cached object without an event, and
// is counted as such.
func TestResync(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c, "resync")
	create(t, c, pod(ns, "p", true, nil))
	inst := startInstance(t, instanceOptions{rules: podRule("audit-privileged", ns, privileged, "privileged"), resync: time.Second})
	waitReport(t, c, ns, "finding", func(st reportState) bool { return st.has("audit-privileged/p/c") })
	before := inst.metric(t, "portal_audit_evaluations_total", nil)
	eventually(t, 30*time.Second, "resyncs re-evaluate", func() (bool, error) {
		return inst.metric(t, "portal_audit_resyncs_total", nil) > 0 &&
			inst.metric(t, "portal_audit_evaluations_total", nil) > before, nil
	})
	if n := inst.metric(t, "portal_audit_events_total", map[string]string{"event": "update"}); n != 0 {
		t.Errorf("resyncs counted as %v updates", n)
	}
}
