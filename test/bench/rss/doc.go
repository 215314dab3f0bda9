// Package rss measures the resident memory of the real `portal run` binary
// started with the flags the Helm chart's default values render. It holds
// only a benchmark; `make test` (go test without -bench) runs nothing here.
//
// BenchmarkPortalRSS starts one real control plane (etcd and kube-apiserver
// from bin/k8s, through internal/devcluster), builds cmd/portal as `make
// image` does (static, -trimpath, -s -w), and runs it as a child process with
// the container args of the chart's default render
// (deploy/helm/testdata/golden/default.yaml): admission only, leader
// election, self-issued webhook certificate, HTTPS /metrics with Kubernetes
// authentication. Outside a pod it changes only where things listen
// (127.0.0.1 on free ports, the webhook configuration pointing at
// https://127.0.0.1:<port> through --webhook-local) and adds --kubeconfig.
// GOMEMLIMIT and GOGC come from the environment the benchmark runs in, as
// they would from the pod's.
//
// With the pod-security bundle installed as PortalClusterRules (19 rules,
// as the chart benchmark does), it waits for Portal to be ready and for its
// webhook configuration to carry a CA bundle, creates pods through the
// webhook from several clients (PORTAL_BENCH_RSS_PODS, default 300;
// PORTAL_BENCH_CLIENTS, default 8), lets Portal settle, and reads
// /proc/<pid>/status: VmRSS, RssAnon (heap, stacks, runtime), RssFile (pages
// of the executable touched) and VmHWM (the high-water mark). It reports
// them in MiB, the figure process_resident_memory_bytes gives in a pod.
//
// PORTAL_BENCH_RSS_ARGS adds flags after the chart's (to compare, e.g.
// --drop-executable-pages=false); GOGC and GOMEMLIMIT in the environment
// reach Portal. PORTAL_BENCH_RSS_BINARY runs a binary built elsewhere
// instead of building one. It also prints how much of each section of the
// executable is resident (/proc/<pid>/pagemap).
//
// PORTAL_BENCH_RSS_HEAPPROFILE=<file> also writes a heap profile of the
// child taken from --pprof-bind-address after the run.
//
//	go test -run '^$' -bench '^BenchmarkPortalRSS$' -benchtime 1x ./test/bench/rss/
package rss
