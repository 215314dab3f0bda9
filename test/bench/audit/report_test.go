//go:build linux

package audit_test

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// report prints one run's figures: the table docs/performance.md quotes.
func report(w io.Writer, r *result) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond)) }
	fmt.Fprintf(w, "\nAudit benchmark: %s; load average %s before, %s after\n", machine(), r.loadBefore, r.loadAfter)
	fmt.Fprintf(w, "%d pods created (%d failed) over %d namespaces by %d clients in %s (%.0f/s); %d violating; all findings in and Portal idle %s after the first create; %v evaluations\n\n",
		r.pods, r.failed, namespaces, clients, r.createElapsed.Round(time.Millisecond), float64(r.pods)/r.createElapsed.Seconds(), r.violating, r.settleElapsed.Round(time.Millisecond), r.evaluations)
	fmt.Fprintln(w, "| measured from the create request being sent to | n | mean ms | p50 ms | p95 ms | p99 ms | max ms |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, x := range []struct {
		what string
		l    latencies
	}{{"the pod in its namespace's PolicyReport (watch)", r.toReport}, {"the pod's alert in Alertmanager (GET /api/v2/alerts every 100 ms)", r.toAlert}} {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s |\n", x.what, x.l.N, ms(x.l.Mean), ms(x.l.P50), ms(x.l.P95), ms(x.l.P99), ms(x.l.Max))
	}
	fmt.Fprintln(w)
	for _, s := range []string{"policyreport", "alertmanager"} {
		fmt.Fprintf(w, "portal_audit_event_to_report_seconds{sink=%q} (%v samples): p50 ≈ %.0f ms (bucket ≤ %.0f ms), p99 ≈ %.0f ms (bucket ≤ %.0f ms)\n",
			s, r.histCount[s], r.histP50[s]*1e3, r.histP50Bound[s]*1e3, r.histP99[s]*1e3, r.histP99Bound[s]*1e3)
	}
	fmt.Fprintf(w, "Portal RSS: idle %.1f MiB, peak sampled %.1f MiB (anon %.1f MiB), VmHWM %.1f MiB\n",
		float64(r.rssIdle)/1024, float64(r.rssPeakSampled)/1024, float64(r.anonPeakSampled)/1024, float64(r.rssHWM)/1024)
	keys := make([]string, 0, len(r.writes))
	for k := range r.writes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %v", k, r.writes[k]))
	}
	fmt.Fprintf(w, "API server writes (apiserver_request_total, pods excluded): %s; Portal's (leases excluded): %v; portal_policyreport_writes_total: %v\n",
		strings.Join(parts, ", "), r.portalWrites, r.reportWritesByPortal)
	fmt.Fprintf(w, "PolicyReport apply: API server mean %s (apiserver_request_duration_seconds); as Portal saw it p50 ≈ %.0f ms, p99 ≈ %.0f ms (portal_policyreport_write_duration_seconds)\n\n",
		r.reportApplyMean.Round(100*time.Microsecond), r.applyP50*1e3, r.applyP99*1e3)
}

// printSlowest prints the n pods slowest to reach their report, with when
// they were sent: a cluster of them at one moment is a stall, not a tail.
func printSlowest(n int, want []int, toReport, toAlert []time.Duration, describe func(i int) string) {
	idx := make([]int, len(want))
	for j := range idx {
		idx[j] = j
	}
	sort.Slice(idx, func(a, b int) bool { return toReport[idx[a]] > toReport[idx[b]] })
	for _, j := range idx[:min(n, len(idx))] {
		fmt.Printf("slowest: %s: report %v, alert %v\n", describe(want[j]), toReport[j].Round(time.Millisecond), toAlert[j].Round(time.Millisecond))
	}
}
