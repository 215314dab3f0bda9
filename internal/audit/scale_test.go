package audit_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/sink/policyreport"
)

const scalePods = 3000

// 3,000 violating pods in one namespace: the results are sharded across
// reports that each stay far under the object size limit, with summary
// counts equal to the truth and no result twice; deleting the pods clears
// the reports.
func TestShardedReports(t *testing.T) {
	c := cluster(t)
	ns := namespace(t, c, "scale")
	inst := startInstance(t, instanceOptions{rules: podRule("audit-privileged", ns, privileged, "container {{ container.name }} of {{ metadata.name }} is privileged")})

	start := time.Now()
	forPods(t, scalePods, func(name string) error { return c.Create(context.Background(), pod(ns, name, true, nil)) })
	t.Logf("created %d pods in %v", scalePods, time.Since(start))
	var st reportState
	eventually(t, 2*time.Minute, "all pods reported", func() (bool, error) {
		var err error
		st, err = readReports(t, c, ns)
		return err == nil && st.fail == scalePods && len(st.results) == scalePods, err
	})
	t.Logf("all %d findings in %d reports %v after the first create", scalePods, len(st.reports), time.Since(start))
	checkReports(t, st)
	if min := (scalePods + policyreport.DefaultMaxResults - 1) / policyreport.DefaultMaxResults; len(st.reports) < min {
		t.Errorf("%d reports, want at least %d of at most %d results", len(st.reports), min, policyreport.DefaultMaxResults)
	}
	for _, r := range st.reports {
		if len(r.Results) > policyreport.DefaultMaxResults {
			t.Errorf("report %s has %d results", r.Name, len(r.Results))
		}
	}
	writes := inst.metric(t, "portal_policyreport_writes_total", map[string]string{"op": "apply"})
	t.Logf("report applies: %v", writes)

	// Delete a third of them: their results leave the reports, the
	// others stay, each once.
	start = time.Now()
	forPods(t, scalePods/3, func(name string) error {
		return c.Delete(context.Background(), pod(ns, name, true, nil), client.GracePeriodSeconds(0))
	})
	st = waitReport(t, c, ns, "deleted pods' results removed", func(st reportState) bool {
		return st.fail == scalePods-scalePods/3 && len(st.results) == scalePods-scalePods/3
	})
	t.Logf("%d deletions reflected %v after the first delete, in %d reports; report applies %v, deletes %v", scalePods/3, time.Since(start), len(st.reports),
		inst.metric(t, "portal_policyreport_writes_total", map[string]string{"op": "apply"}),
		inst.metric(t, "portal_policyreport_writes_total", map[string]string{"op": "delete"}))
	if st.has("audit-privileged/p-0000/c") || !st.has(fmt.Sprintf("audit-privileged/p-%04d/c", scalePods-1)) {
		t.Error("the wrong results left the reports")
	}
}

// forPods calls do for n pod names from a bounded pool of writers.
func forPods(t *testing.T, n int, do func(name string) error) {
	t.Helper()
	names := make(chan string)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 24 {
		wg.Go(func() {
			for name := range names {
				if err := do(name); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range n {
		names <- fmt.Sprintf("p-%04d", i)
	}
	close(names)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}
