//go:build linux

package manager

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

// findingWatch follows every PolicyReport through a watch and keeps, for
// each Deployment, whether a report holds a failing require-pdb-per-deployment
// result for it and when that last changed, as the watch delivered it.
type findingWatch struct {
	mu      sync.Mutex
	reports map[string]map[string]bool // report ns/name -> failing Deployments (ns/name)
	count   map[string]int             // Deployment -> reports holding it
	flipped map[string]time.Time       // Deployment -> when its presence last changed
	changed chan struct{}              // closed and replaced on every change
}

func newFindingWatch() *findingWatch {
	return &findingWatch{reports: map[string]map[string]bool{}, count: map[string]int{}, flipped: map[string]time.Time{}, changed: make(chan struct{})}
}

// failing is how many Deployments have a failing result now.
func (w *findingWatch) failing() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.count)
}

// await waits until the Deployment's finding is present (or absent) after
// since, and returns when the watch delivered that.
func (w *findingWatch) await(ctx context.Context, deployment string, present bool, since time.Time) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		w.mu.Lock()
		at, ch := w.flipped[deployment], w.changed
		ok := (w.count[deployment] > 0) == present && at.After(since)
		w.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// set records a report's failing Deployments (nil: the report is gone).
func (w *findingWatch) set(report string, failing map[string]bool, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.reports[report]
	for d := range old {
		if failing[d] {
			continue
		}
		if w.count[d]--; w.count[d] == 0 {
			delete(w.count, d)
			w.flipped[d] = at
		}
	}
	for d := range failing {
		if old[d] {
			continue
		}
		if w.count[d]++; w.count[d] == 1 {
			w.flipped[d] = at
		}
	}
	if failing == nil {
		delete(w.reports, report)
	} else {
		w.reports[report] = failing
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// failingIn lists the Deployments with a failing result of the rule in a
// PolicyReport.
func failingIn(u *unstructured.Unstructured) map[string]bool {
	out := map[string]bool{}
	results, _, _ := unstructured.NestedSlice(u.Object, "results")
	for _, x := range results {
		m, _ := x.(map[string]any)
		if m["policy"] != changeRule || m["result"] != "fail" {
			continue
		}
		refs, _ := m["resources"].([]any)
		for _, r := range refs {
			ref, _ := r.(map[string]any)
			if ref["kind"] == "Deployment" {
				out[fmt.Sprint(ref["namespace"], "/", ref["name"])] = true
			}
		}
	}
	return out
}

// run lists and watches every PolicyReport until ctx ends, listing again
// whenever the watch ends or expires.
func (w *findingWatch) run(ctx context.Context, dyn dynamic.Interface) error {
	reports := dyn.Resource(policyReportGVR)
	for ctx.Err() == nil {
		list, err := reports.List(ctx, metav1.ListOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := time.Now()
		seen := map[string]bool{}
		for i := range list.Items {
			key := list.Items[i].GetNamespace() + "/" + list.Items[i].GetName()
			seen[key] = true
			w.set(key, failingIn(&list.Items[i]), now)
		}
		w.mu.Lock()
		known := maps.Clone(w.reports)
		w.mu.Unlock()
		for key := range known {
			if !seen[key] {
				w.set(key, nil, now)
			}
		}
		wi, err := reports.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for ev := range wi.ResultChan() {
			now := time.Now()
			u, ok := ev.Object.(*unstructured.Unstructured)
			if ev.Type == watch.Error || !ok {
				break // list again
			}
			key := u.GetNamespace() + "/" + u.GetName()
			if ev.Type == watch.Deleted {
				w.set(key, nil, now)
			} else {
				w.set(key, failingIn(u), now)
			}
		}
		wi.Stop()
	}
	return nil
}
