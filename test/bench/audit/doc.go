// Package audit benchmarks Portal's continuous audit (L5) against a real
// kube-apiserver. It holds only a benchmark; `make test` (go test without
// -bench) runs nothing here: TestMain starts nothing unless the package's
// test binary is re-executed as the benchmark's Portal child (below).
//
// BenchmarkAudit starts one control plane (etcd and kube-apiserver from
// bin/k8s, through internal/devcluster, which installs deploy/crds with the
// wgpolicyk8s.io PolicyReport CRDs) and one Alertmanager (bin/alertmanager,
// through internal/sink/alertmanager/amtest). It installs the restricted
// pod-security bundle (examples/rules/pod-security, baseline and
// restricted: 19 rules, mode [admission, audit]) as PortalClusterRules and
// runs Portal in a child process, this test binary started again with
// PORTAL_BENCH_AUDIT_CHILD set, which calls internal/manager.Run with the
// defaults of `portal run` except: admission off (no webhook), audit on,
// AlertmanagerURL set, leader election off. The audit sinks are therefore
// the wgpolicyk8s PolicyReports, Alertmanager, the Prometheus gauge and the
// JSON finding log. A separate process lets the benchmark read Portal's
// memory from /proc/<pid>/status (VmHWM, and VmRSS sampled every 50 ms).
//
// It then creates PORTAL_BENCH_AUDIT_PODS pods (default 10,000) spread over
// PORTAL_BENCH_AUDIT_NAMESPACES namespaces (default 10) with
// PORTAL_BENCH_CLIENTS concurrent clients (default 8);
// PORTAL_BENCH_AUDIT_VIOLATING_PCT percent of them (default 20) carry one
// of ten violations, the others are compliant. Meanwhile it
//
//   - watches every PolicyReport and notes when each pod first appears in
//     a result: event-to-report is that moment minus the moment its create
//     request was sent;
//   - polls Alertmanager's GET /api/v2/alerts every 100 ms and notes when
//     each pod first has an alert: event-to-alert likewise (the poll adds up
//     to 100 ms).
//
// It waits until every violating pod is in both, Portal has evaluated every
// pod and its queue is empty, then 5 s more, and checks that no compliant
// pod appeared. It also reports Portal's own
// portal_audit_event_to_report_seconds histogram by sink (from the informer
// event to the sink having written or sent), and the API server writes
// during the run from the API server's apiserver_request_total (mutating
// verbs by resource, before and after): the benchmark writes only pods and
// the API server renews its own lease, so the rest is Portal's.
//
// It also prints the API server's mean time to serve one PolicyReport apply
// (apiserver_request_duration_seconds). With PORTAL_BENCH_AUDIT_HEAPPROFILE
// naming a file, the child writes its heap profile there once the findings
// settled (read it with go tool pprof); PORTAL_BENCH_AUDIT_CPUPROFILE
// likewise names a file for the child's CPU profile of the whole run, and
// PORTAL_BENCH_AUDIT_REPORT_MAX_RESULTS sets Portal's --report-max-results,
// PORTAL_BENCH_AUDIT_LOG names a file to keep Portal's log in, and
// PORTAL_BENCH_AUDIT_SLOWEST=N prints the N pods slowest to reach their report
// with the moment each was sent.
//
// Run it with `make bench-audit`, or
//
//	go test -run '^$' -bench BenchmarkAudit -benchtime 1x -timeout 30m ./test/bench/audit/
//
// Figures and their reading are in docs/performance.md, section "Audit".
package audit
