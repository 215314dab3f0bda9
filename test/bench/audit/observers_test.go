//go:build linux

package audit_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
)

// observers note when each pod first appears in a PolicyReport (a watch on
// every PolicyReport) and in Alertmanager (a poll).
type observers struct {
	report, alert *firstSeen
	watchErr      chan error
	stop          func()
}

func startObservers(ctx context.Context, dyn dynamic.Interface, am *amtest.Server) *observers {
	o := &observers{
		report:   &firstSeen{at: map[string]time.Time{}},
		alert:    &firstSeen{at: map[string]time.Time{}},
		watchErr: make(chan error, 1),
	}
	obsCtx, obsStop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { o.watchErr <- watchReports(obsCtx, dyn, o.report) })
	wg.Go(func() { pollAlerts(obsCtx, am, o.alert) })
	o.stop = func() { obsStop(); wg.Wait() }
	return o
}

// firstSeen records when each namespace/name was first observed.
type firstSeen struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (f *firstSeen) note(key string, t time.Time) {
	f.mu.Lock()
	if _, ok := f.at[key]; !ok {
		f.at[key] = t
	}
	f.mu.Unlock()
}

func (f *firstSeen) get(key string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.at[key]
	return t, ok
}

// watchReports watches every PolicyReport and notes, for each pod named in
// a result, when it first appeared. It re-opens the watch when the server
// closes it.
func watchReports(ctx context.Context, dyn dynamic.Interface, seen *firstSeen) error {
	noteReport := func(u *unstructured.Unstructured, now time.Time) {
		results, _, _ := unstructured.NestedSlice(u.Object, "results")
		for _, r := range results {
			rm, ok := r.(map[string]any)
			if !ok {
				continue
			}
			refs, _, _ := unstructured.NestedSlice(rm, "resources")
			for _, ref := range refs {
				m, ok := ref.(map[string]any)
				if !ok || m["kind"] != "Pod" {
					continue
				}
				ns, _ := m["namespace"].(string)
				name, _ := m["name"].(string)
				seen.note(ns+"/"+name, now)
			}
		}
	}
	list, err := dyn.Resource(policyReports).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	rv := list.GetResourceVersion()
	now := time.Now()
	for i := range list.Items {
		noteReport(&list.Items[i], now)
	}
	for ctx.Err() == nil {
		w, err := dyn.Resource(policyReports).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for ev := range w.ResultChan() {
			now := time.Now()
			if ev.Type == watch.Error {
				w.Stop()
				return fmt.Errorf("watch error: %v", ev.Object)
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			rv = u.GetResourceVersion()
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				noteReport(u, now)
			}
		}
		w.Stop()
	}
	return nil
}

// pollAlerts polls Alertmanager's GET /api/v2/alerts every 100 ms and notes
// when each pod first has an alert.
func pollAlerts(ctx context.Context, am *amtest.Server, seen *firstSeen) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if as, err := am.Alerts(""); err == nil {
			now := time.Now()
			for _, a := range as {
				if a.Labels["kind"] == "Pod" {
					seen.note(a.Labels["namespace"]+"/"+a.Labels["name"], now)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
