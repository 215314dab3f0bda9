// Package admission benchmarks Portal's admission webhook against the API
// server with no policy and against a ValidatingAdmissionPolicy. It holds only
// a benchmark; `make test` (go test without -bench) runs nothing here.
//
// BenchmarkAdmission starts one real control plane (etcd and kube-apiserver
// from bin/k8s, through internal/devcluster) and creates compliant pods
// through it in three configurations, each in its own namespace:
//
//	(a) bench-none    no admission policy;
//	(b) bench-portal  Portal's validating webhook with the restricted
//	                  pod-security bundle (examples/rules/pod-security,
//	                  baseline and restricted: 19 rules, installed as
//	                  PortalClusterRules);
//	(c) bench-vap     a ValidatingAdmissionPolicy and binding whose CEL
//	                  validations do the same checks (vap_test.go).
//
// Portal runs in a child process, this test binary started again with
// PORTAL_BENCH_ADMISSION_CHILD set, which calls internal/manager.Run with the
// defaults of `portal run --admission --leader-elect=false` (no other layer)
// except that the webhook listens on 127.0.0.1 with a self-issued certificate
// and the webhook configuration points at https://127.0.0.1:<port>
// (AdmissionConfig.LocalURL, as `portal dev` does; `portal run` has no flag
// for it). A separate process lets the benchmark read Portal's own memory
// from /proc/<pid>/status. Portal's webhook configuration covers every
// namespace but the system ones and its own, so the benchmark narrows its
// namespaceSelector to (b)'s namespace, and checks at the end that Portal
// decided exactly the requests of (b).
//
// Before measuring, a server-side dry run of the compliant pod and of 19
// violations (every rule of the bundle fails in at least one) in each
// namespace checks that (a) admits everything,
// that Portal denies each violation with exactly the rules expected, and that
// the policy denies it with the first of them (a policy reports only its
// first failing validation). Then every configuration creates 100 pods
// unmeasured (connections, caches), and then the measured rounds run: in each
// round every configuration creates 250 pods with 8 concurrent clients, the
// order of the configurations rotating from round to round, 12 rounds in all
// (3,000 pods per configuration). Pods are not deleted: nothing schedules
// them, and the API server stays healthy with the 9,300 of them.
//
// The benchmark prints a Markdown report and reports the key figures as
// benchmark metrics:
//   - p50, p95, p99 (nearest rank) of the end-to-end create latency per
//     configuration, as the client sees it, and the difference of (b) and (c)
//     to (a);
//   - Portal's in-handler decision time, from the portal_admission_latency_seconds
//     histogram scraped from Portal's /metrics before and after the rounds,
//     as PromQL's histogram_quantile would estimate it (linear within the
//     bucket), with the bucket's upper bound, which the true quantile cannot
//     exceed, and the exact mean (sum/count);
//   - the kube-apiserver's own view: the mean duration of a call to Portal's
//     webhook (apiserver_admission_webhook_admission_duration_seconds) and the
//     time of the ValidatingAdmissionPolicy admission plugin per pod of (c)
//     (apiserver_admission_controller_admission_duration_seconds; an upper
//     bound, as the plugin also runs, finding no binding, for (a) and (b));
//   - the same decision measured directly, without buckets: after the
//     rounds, Portal's handler (admission.Webhook.Handle, the span the
//     histogram times) is called one request at a time in the benchmark's
//     process on a pod of (b) as the API server stored it (managedFields and
//     defaults included), with the rule evaluation alone timed beside it;
//   - Portal's resident memory: VmRSS before the rounds, the highest VmRSS
//     sampled every 50 ms during them, and VmHWM, the process's peak, with
//     the anonymous (heap, stacks) and file-backed (executable pages) parts
//     of the samples.
//
// PORTAL_BENCH_PODS, PORTAL_BENCH_ROUND, PORTAL_BENCH_CLIENTS and
// PORTAL_BENCH_WARMUP override the pods per configuration, the pods per round,
// the clients and the warm-up pods. Run it with
//
//	make bench-admission
//
// or
//
//	go test -run '^$' -bench BenchmarkAdmission -benchtime 1x -timeout 30m ./test/bench/admission/
//
// Every call of the benchmark function is a whole run on a fresh control
// plane, so -count 3 makes three independent runs (the figures in
// docs/performance.md are their medians).
//
// The policy's CEL covers, one validation per rule of the bundle: AppArmor
// (pod, containers, annotations), capabilities (baseline: only the default
// set added; restricted: drop ALL, add at most NET_BIND_SERVICE), host
// namespaces, hostPath volumes, host ports, host in probes and lifecycle
// handlers, privileged, procMount (baseline with the user-namespace
// exemption, restricted without), SELinux options, seccomp (baseline:
// not Unconfined; restricted: set at pod or container level), sysctls (the
// safe set), Windows HostProcess, allowPrivilegeEscalation, restricted volume
// types, runAsNonRoot and runAsUser (with the user-namespace exemption); the
// Windows exemption (spec.os.name=windows) of the restricted capabilities,
// seccomp and allowPrivilegeEscalation checks. Every check looks at
// containers, initContainers and ephemeralContainers. It matches Pods only,
// where the bundle also covers the pod templates of workload kinds; the
// benchmark creates only Pods. The policy's status.typeChecking stays empty
// on this control plane (its controller runs in kube-controller-manager);
// the API server compiles the expressions when the policy is created, and
// the dry runs above show they decide as the bundle does. One difference:
// the bundle's volume check admits a volume with no source at all, which the
// API server defaults to emptyDir before admission, so the CEL does not look
// for it.
package admission
