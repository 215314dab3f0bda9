package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// layout is how the peers and the load generator share the machine's CPUs.
type layout struct {
	name, title string
	// peerCPUs runs the WAF under test, loadCPUs wrk, the upstream and this
	// process (the rule set cache server); taskset -c lists.
	peerCPUs, loadCPUs string
	// nginxWorkers is nginx's worker_processes, gomaxprocs the waf-proxy's
	// GOMAXPROCS (0: Go's default, every CPU it may run on).
	nginxWorkers string
	gomaxprocs   int
	threads      int
	connections  int
}

// layouts are the two ways of sharing the machine: per-core, what a platform
// pays for (each WAF alone on one core, wrk on another), and the previous
// two-core run (each WAF and wrk on every core, so it measures the
// scheduler too).
func layouts(o options) (map[string]layout, error) {
	all := fmt.Sprintf("0-%d", runtime.NumCPU()-1)
	ls := map[string]layout{
		"per-core": {name: "per-core", title: "per core: each WAF on CPU 1 alone (nginx worker_processes 1, waf-proxy GOMAXPROCS=1), wrk and the upstream on CPU 0",
			peerCPUs: "1", loadCPUs: "0", nginxWorkers: "1", gomaxprocs: 1, threads: 1, connections: o.connections},
		"two-core": {name: "two-core", title: fmt.Sprintf("shared: each WAF, wrk and the upstream on all %d CPUs (nginx worker_processes auto, waf-proxy default GOMAXPROCS)", runtime.NumCPU()),
			peerCPUs: all, loadCPUs: all, nginxWorkers: "auto", threads: o.threads, connections: o.connections},
	}
	if runtime.NumCPU() < 2 {
		delete(ls, "per-core")
	}
	return ls, nil
}

// pin wraps a command in taskset -c cpus.
func (l layout) pin(cpus, name string, args ...string) (string, []string) {
	return "taskset", append([]string{"-c", cpus, name}, args...)
}

// pinSelf moves every thread of this process (the upstream and the cache
// server) to the load generator's CPUs, so in the per-core layout they do
// not take the peer's core. Threads started later inherit it.
func (l layout) pinSelf() error {
	out, err := exec.Command("taskset", "-a", "-p", "-c", l.loadCPUs, strconv.Itoa(os.Getpid())).CombinedOutput()
	if err != nil {
		return fmt.Errorf("taskset -a -p -c %s: %v: %s", l.loadCPUs, err, strings.TrimSpace(string(out)))
	}
	return nil
}
