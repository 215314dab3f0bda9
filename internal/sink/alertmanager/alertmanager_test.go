package alertmanager_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/sink/alertmanager"
	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
)

var rule = &core.Rule{Name: "no-root", Severity: core.SeverityHigh, Category: "Pod Security Standards (Restricted)", Alert: "InsecureWorkload", Source: core.Source{Kind: "PortalClusterRule", Name: "no-root"}}

func object(ns, name string, failing bool, at time.Time) core.ObjectFindings {
	ref := core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: name}
	of := core.ObjectFindings{Object: ref, Observed: at}
	if failing {
		of.Findings = []core.Finding{{
			Result:    core.Result{Rule: rule, Resource: ref, Outcome: core.OutcomeFail, Container: "app", Message: name + " runs as root"},
			FirstSeen: at,
		}}
	}
	return of
}

func start(t *testing.T, o alertmanager.Options) (*alertmanager.Sink, *atomic.Int64) {
	t.Helper()
	s, err := alertmanager.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	delivered := &atomic.Int64{}
	go func() {
		defer close(done)
		s.Run(ctx, func(time.Time) { delivered.Add(1) })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return s, delivered
}

func waitAlerts(t *testing.T, am *amtest.Server, ns string, want []string) {
	t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		keys, err := am.AlertKeys(ns)
		if err != nil {
			return false, nil
		}
		got = slices.Sorted(maps.Keys(keys))
		return slices.Equal(got, want), nil
	})
	if err != nil {
		t.Fatalf("alerts of %s: got %v, want %v", ns, got, want)
	}
}

// The alert carries the finding's labels (the rule's category among them, for
// routes), annotation and first sight;
// resolving the finding resolves the alert.
func TestAlertShapeAndResolution(t *testing.T) {
	am := amtest.Start(t)
	s, delivered := start(t, alertmanager.Options{URL: am.URL(), ResendInterval: time.Minute})
	first := time.Now().Add(-time.Hour).Truncate(time.Second)
	if err := s.Publish(context.Background(), core.FindingBatch{Full: true, Objects: []core.ObjectFindings{object("shape", "p", true, first)}}); err != nil {
		t.Fatal(err)
	}
	waitAlerts(t, am, "shape", []string{"no-root/p/app"})
	as, err := am.Alerts("shape")
	if err != nil {
		t.Fatal(err)
	}
	a := as[0]
	want := map[string]string{"alertname": "InsecureWorkload", "rule": "no-root", "severity": "high", "category": "Pod Security Standards (Restricted)", "namespace": "shape", "kind": "Pod", "name": "p", "container": "app"}
	if !maps.Equal(a.Labels, want) {
		t.Errorf("labels = %v, want %v", a.Labels, want)
	}
	if a.Annotations["message"] != "p runs as root" || !a.StartsAt.Equal(first) {
		t.Errorf("message %q, startsAt %v; want %v", a.Annotations["message"], a.StartsAt, first)
	}
	if d := time.Until(a.EndsAt); d < 3*time.Minute || d > 5*time.Minute {
		t.Errorf("endsAt %v ahead, want four re-send intervals", d)
	}
	if err := s.Publish(context.Background(), core.FindingBatch{Objects: []core.ObjectFindings{object("shape", "p", false, time.Now())}}); err != nil {
		t.Fatal(err)
	}
	waitAlerts(t, am, "shape", nil)
	// Alertmanager may show the resolution before the sink has counted the
	// delivery that caused it.
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return delivered.Load() >= 2, nil
	})
	if n := delivered.Load(); err != nil || n != 2 {
		t.Errorf("%d deliveries reported, want 2", n)
	}
}

// TestNewLeaderKeepsStartsAt: each replica sees a finding first at its own
// moment. A new leader that saw it earlier than the one before must re-send
// the alert as it started, not move its start (Alertmanager keeps the
// earlier of two): the on-call would see it start again. Its own later
// alerts keep their own start, and an alert that resolved starts anew.
func TestNewLeaderKeepsStartsAt(t *testing.T) {
	recv := amtest.NewReceiver(t)
	am := amtest.StartWith(t, amtest.Options{WebhookURL: recv.URL()})
	ctx := context.Background()
	old, _ := start(t, alertmanager.Options{URL: am.URL(), ResendInterval: time.Minute})
	// Nanoseconds, which Alertmanager keeps and its API does not show.
	sent := time.Now().Add(-time.Hour).Truncate(time.Second).Add(123456789)
	if err := old.Publish(ctx, core.FindingBatch{Full: true, Objects: []core.ObjectFindings{object("leader", "p", true, sent)}}); err != nil {
		t.Fatal(err)
	}
	waitAlerts(t, am, "leader", []string{"no-root/p/app"})

	leader, delivered := start(t, alertmanager.Options{URL: am.URL(), ResendInterval: time.Minute})
	seen := sent.Add(-10 * time.Minute)
	mine := time.Now().Add(-time.Minute).Truncate(time.Second)
	if err := leader.Publish(ctx, core.FindingBatch{Full: true, Objects: []core.ObjectFindings{
		object("leader", "p", true, seen), object("leader", "q", true, mine),
	}}); err != nil {
		t.Fatal(err)
	}
	startsAt := func(name string) time.Time {
		t.Helper()
		var at time.Time
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			as, err := am.Alerts("leader")
			if err != nil {
				return false, err
			}
			for _, a := range as {
				if a.Labels["name"] == name {
					at = a.StartsAt
					return delivered.Load() >= 1, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("alert for %s: %v", name, err)
		}
		return at
	}
	if got := startsAt("q"); !got.Equal(mine) {
		t.Errorf("the new leader's own alert starts at %v, want %v", got, mine)
	}
	// The API shows milliseconds; the notification of the group, which
	// q's arrival causes, carries what Alertmanager keeps.
	if got := startsAt("p"); !got.Equal(sent.Truncate(time.Millisecond)) {
		t.Errorf("the alert the old leader sent starts at %v after the new leader re-sent it, want %v", got, sent)
	}
	if notified := notifiedStart(t, recv, "p", "q"); !notified.Equal(sent) {
		t.Errorf("notified with startsAt %v after the new leader re-sent it, want %v", notified, sent)
	}

	// Resolved, then failing again: a new alert, with the new start
	// (after the resolution's endsAt, or Alertmanager merges the two).
	if err := leader.Publish(ctx, core.FindingBatch{Objects: []core.ObjectFindings{object("leader", "p", false, time.Now())}}); err != nil {
		t.Fatal(err)
	}
	waitAlerts(t, am, "leader", []string{"no-root/q/app"})
	again := time.Now().Add(time.Second).Truncate(time.Millisecond)
	if err := leader.Publish(ctx, core.FindingBatch{Objects: []core.ObjectFindings{object("leader", "p", true, again)}}); err != nil {
		t.Fatal(err)
	}
	waitAlerts(t, am, "leader", []string{"no-root/p/app", "no-root/q/app"})
	if got := startsAt("p"); !got.Equal(again) {
		t.Errorf("the alert that fired again starts at %v, want its new start %v", got, again)
	}
}

// notifiedStart returns the startsAt of the alert on name in the first
// notification that also holds the alert on with.
func notifiedStart(t *testing.T, recv *amtest.Receiver, name, with string) time.Time {
	t.Helper()
	var at time.Time
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, n := range recv.Notifications() {
			starts := map[string]time.Time{}
			for _, a := range n.Alerts {
				starts[a.Labels["name"]] = a.StartsAt
			}
			if _, ok := starts[with]; ok {
				at = starts[name]
				return !at.IsZero(), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no notification with the alerts on %s and %s: %v", name, with, err)
	}
	return at
}

// While Alertmanager is down the changes wait in a bounded buffer, the
// overflow is counted, and once it is back every open alert is delivered,
// the dropped ones included.
func TestBufferWhileDown(t *testing.T) {
	am := amtest.Start(t)
	fc := clocktesting.NewFakeClock(time.Now())
	s, _ := start(t, alertmanager.Options{URL: am.URL(), BufferSize: 3, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, ResendInterval: time.Hour, Clock: fc})
	now := fc.Now()
	if err := s.Publish(context.Background(), core.FindingBatch{Full: true, Objects: []core.ObjectFindings{object("down", "p0", true, now)}}); err != nil {
		t.Fatal(err)
	}
	waitAlerts(t, am, "down", []string{"no-root/p0/app"})

	am.Stop()
	var b core.FindingBatch
	var want []string
	for i := 1; i <= 5; i++ {
		b.Objects = append(b.Objects, object("down", fmt.Sprintf("p%d", i), true, now))
		want = append(want, fmt.Sprintf("no-root/p%d/app", i))
	}
	b.Objects = append(b.Objects, object("down", "p0", false, now))
	if err := s.Publish(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.Metrics().Pending); got != 3 {
		t.Errorf("pending = %v, want the buffer size 3", got)
	}
	if got := testutil.ToFloat64(s.Metrics().Dropped); got != 3 {
		t.Errorf("dropped = %v, want 3 of 6 changes", got)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return testutil.ToFloat64(s.Metrics().Failures) > 0, nil
	})
	if err != nil {
		t.Fatal("no failed send while Alertmanager is down")
	}
	if err := am.Start(); err != nil {
		t.Fatal(err)
	}
	// The next try comes after the backoff, on the sink's clock.
	poll(t, "the buffer sent once Alertmanager is back", func() bool {
		fc.Step(200 * time.Millisecond)
		return testutil.ToFloat64(s.Metrics().Pending) == 0
	})
	waitAlerts(t, am, "down", want)
}

// An alert Alertmanager itself refuses (400: its startsAt lies after its
// endsAt, as after a clock step on the replica that first saw the finding)
// stays queued, is retried with backoff and counted by rule, and costs the
// alerts sent with it nothing: they are delivered, and so is one raised
// while the refused alert keeps being retried.
func TestRefusedAlertKeepsOthers(t *testing.T) {
	am := amtest.Start(t)
	fc := clocktesting.NewFakeClock(time.Now())
	s, delivered := start(t, alertmanager.Options{URL: am.URL(), MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, ResendInterval: time.Hour, Clock: fc})
	now := fc.Now()
	b := core.FindingBatch{Full: true}
	for i := range 3 {
		b.Objects = append(b.Objects, object("refused", fmt.Sprintf("p%d", i), true, now))
	}
	b.Objects = append(b.Objects, object("refused", "skewed", true, now.Add(48*time.Hour)))
	if err := s.Publish(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	waitAlerts(t, am, "refused", []string{"no-root/p0/app", "no-root/p1/app", "no-root/p2/app"})
	poll(t, "the accepted alerts reported delivered", func() bool { return delivered.Load() == 3 })
	poll(t, "the refused alert counted by rule and retried", func() bool {
		fc.Step(200 * time.Millisecond)
		return testutil.ToFloat64(s.Metrics().RefusedTotal.WithLabelValues("no-root")) >= 2
	})
	if got := testutil.ToFloat64(s.Metrics().Refused); got != 1 {
		t.Errorf("refused alerts = %v, want 1", got)
	}
	if got := testutil.ToFloat64(s.Metrics().Pending); got != 1 {
		t.Errorf("pending = %v, want the refused alert still queued", got)
	}

	if err := s.Publish(context.Background(), core.FindingBatch{Objects: []core.ObjectFindings{object("refused", "later", true, fc.Now())}}); err != nil {
		t.Fatal(err)
	}
	waitAlerts(t, am, "refused", []string{"no-root/later/app", "no-root/p0/app", "no-root/p1/app", "no-root/p2/app"})
	if got := testutil.ToFloat64(s.Metrics().Refused); got != 1 {
		t.Errorf("refused alerts = %v after the next alert, want 1", got)
	}
}

// A proxy in front of Alertmanager that refuses everything for a while (a
// gateway answering 403) drops nothing: the alerts raised and resolved
// meanwhile wait, and once it lets requests through they reach Alertmanager,
// the resolution included, with no re-send needed.
func TestRefusingProxyDropsNothing(t *testing.T) {
	am := amtest.Start(t)
	target, err := url.Parse(am.URL())
	if err != nil {
		t.Fatal(err)
	}
	var refusing atomic.Bool
	var refusals atomic.Int64
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refusing.Load() {
			refusals.Add(1)
			http.Error(w, "forbidden by the gateway", http.StatusForbidden)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)

	fc := clocktesting.NewFakeClock(time.Now())
	s, delivered := start(t, alertmanager.Options{URL: proxy.URL, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, ResendInterval: time.Hour, Clock: fc})
	now := fc.Now()
	if err := s.Publish(context.Background(), core.FindingBatch{Full: true, Objects: []core.ObjectFindings{object("proxy", "p0", true, now)}}); err != nil {
		t.Fatal(err)
	}
	waitAlerts(t, am, "proxy", []string{"no-root/p0/app"})

	refusing.Store(true)
	b := core.FindingBatch{Objects: []core.ObjectFindings{object("proxy", "p0", false, now)}}
	for i := 1; i <= 4; i++ {
		b.Objects = append(b.Objects, object("proxy", fmt.Sprintf("p%d", i), true, now))
	}
	if err := s.Publish(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	poll(t, "a refusal", func() bool { return refusals.Load() >= 1 })
	if got := testutil.ToFloat64(s.Metrics().Pending); got != 5 {
		t.Errorf("pending = %v while refused, want all 5 changes queued", got)
	}
	poll(t, "refused sends retried", func() bool { fc.Step(200 * time.Millisecond); return refusals.Load() >= 3 })
	if got := testutil.ToFloat64(s.Metrics().Failures); got < 3 {
		t.Errorf("send failures = %v, want each refusal counted", got)
	}

	refusing.Store(false)
	poll(t, "queue drained and every change reported delivered", func() bool {
		fc.Step(200 * time.Millisecond)
		return testutil.ToFloat64(s.Metrics().Pending) == 0 && delivered.Load() == 6
	})
	waitAlerts(t, am, "proxy", []string{"no-root/p1/app", "no-root/p2/app", "no-root/p3/app", "no-root/p4/app"})
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestTenantRuleCannotImpersonateAPlatformAlert: a PortalRule named like a
// PortalClusterRule, with its alert and severity, failing on the same object
// raises an alert of its own (rule_namespace names it) against a real
// Alertmanager; the platform's alert keeps its message. A tenant's megabyte
// alert name and message reach Alertmanager cut to their bounds.
func TestTenantRuleCannotImpersonateAPlatformAlert(t *testing.T) {
	am := amtest.Start(t)
	s, _ := start(t, alertmanager.Options{URL: am.URL(), ResendInterval: time.Minute})
	const ns = "impersonate"
	tenant := *rule
	tenant.Namespace, tenant.Source = ns, core.Source{Kind: "PortalRule", Namespace: ns, Name: "no-root"}
	huge := &core.Rule{Name: "huge", Namespace: ns, Severity: core.SeverityLow, Alert: strings.Repeat("A", 1<<20)}
	ref := core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: "p"}
	now := time.Now()
	of := core.ObjectFindings{Object: ref, Observed: now, Findings: []core.Finding{
		{Result: core.Result{Rule: rule, Resource: ref, Outcome: core.OutcomeFail, Container: "app", Message: "the platform says"}, FirstSeen: now},
		{Result: core.Result{Rule: &tenant, Resource: ref, Outcome: core.OutcomeFail, Container: "app", Message: "all is well, ignore"}, FirstSeen: now},
		{Result: core.Result{Rule: huge, Resource: ref, Outcome: core.OutcomeFail, Message: strings.Repeat("m", 1<<20)}, FirstSeen: now},
	}}
	if err := s.Publish(context.Background(), core.FindingBatch{Full: true, Objects: []core.ObjectFindings{of}}); err != nil {
		t.Fatal(err)
	}
	var as []amtest.Alert
	poll(t, "three alerts", func() bool {
		var err error
		as, err = am.Alerts(ns)
		return err == nil && len(as) == 3
	})
	for _, a := range as {
		switch {
		case a.Labels["rule"] == "no-root" && a.Labels["rule_namespace"] == "":
			if a.Annotations["message"] != "the platform says" {
				t.Errorf("the platform's alert says %q", a.Annotations["message"])
			}
		case a.Labels["rule"] == "no-root":
			if a.Labels["rule_namespace"] != ns || a.Annotations["message"] != "all is well, ignore" {
				t.Errorf("the tenant's alert: %v %v", a.Labels, a.Annotations)
			}
		default:
			if n := len(a.Labels["alertname"]); n > alertmanager.MaxLabelBytes {
				t.Errorf("alertname of %d bytes reached Alertmanager, want at most %d", n, alertmanager.MaxLabelBytes)
			}
			if n := len(a.Annotations["message"]); n > alertmanager.MaxMessageBytes {
				t.Errorf("message of %d bytes reached Alertmanager, want at most %d", n, alertmanager.MaxMessageBytes)
			}
		}
	}
}

// While Alertmanager cannot be reached, sends are retried after a delay that
// doubles from MinBackoff up to MaxBackoff on the sink's clock, never
// before the delay has passed on it; once a send goes through, the next
// outage starts again from MinBackoff.
func TestUnreachableBacksOffOnTheClock(t *testing.T) {
	var failing atomic.Bool
	var posts atomic.Int64
	failing.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		posts.Add(1)
		if failing.Load() {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	fc := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	s, _ := start(t, alertmanager.Options{URL: srv.URL, MinBackoff: time.Second, MaxBackoff: 3 * time.Second, ResendInterval: time.Hour,
		Clock: fc, Logger: slog.New(slog.DiscardHandler)})
	// The sink waits on its re-send ticker and, while failing, on its
	// backoff: two waiters.
	retries := func(delays ...time.Duration) {
		t.Helper()
		for _, d := range delays {
			n := posts.Load()
			poll(t, fmt.Sprintf("a failed send waiting %s", d), func() bool { return fc.Waiters() == 2 && posts.Load() == n })
			fc.Step(d - time.Millisecond)
			if fc.Waiters() != 2 || posts.Load() != n {
				t.Fatalf("retried before its %s delay", d)
			}
			fc.Step(time.Millisecond)
			poll(t, fmt.Sprintf("the retry after %s", d), func() bool { return posts.Load() >= n+1 })
		}
	}
	if err := s.Publish(context.Background(), core.FindingBatch{Full: true, Objects: []core.ObjectFindings{object("clock", "p0", true, fc.Now())}}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the first send", func() bool { return posts.Load() == 1 })
	retries(time.Second, 2*time.Second, 3*time.Second)
	failing.Store(false)
	retries(3 * time.Second)
	poll(t, "the queue drained", func() bool { return testutil.ToFloat64(s.Metrics().Pending) == 0 })

	failing.Store(true)
	before := posts.Load()
	if err := s.Publish(context.Background(), core.FindingBatch{Objects: []core.ObjectFindings{object("clock", "p1", true, fc.Now())}}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the send of the next alert", func() bool { return posts.Load() == before+1 })
	retries(time.Second)
}
