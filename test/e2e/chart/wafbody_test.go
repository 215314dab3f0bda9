package chart

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/waf/engine"
)

// bigResponseObjects is a tenant's rule set that asks the waf-proxy to
// inspect responses of up to 1 GiB, and a rule that shows when it is in
// force.
const bigResponseObjects = `
apiVersion: waf.portal.io/v1alpha1
kind: RuleSource
metadata: {name: big-responses}
spec:
  rules: |
    SecResponseBodyAccess On
    SecResponseBodyMimeType application/octet-stream
    SecResponseBodyLimit 1073741824
    SecResponseBodyLimitAction ProcessPartial
    SecRule ARGS_GET "@contains big-marker" "id:9002,phase:1,deny,status:403,msg:'big responses rule set'"
---
apiVersion: waf.portal.io/v1alpha1
kind: RuleSet
metadata: {name: big}
spec:
  sources: [{name: crs}, {name: big-responses}]
`

// checkResponseCap attaches the big-responses rule set to route B through
// policy, sends a 600 MB answer from the Gateway's workload through the
// proxy, and checks that the proxy process on the node held at most a small
// part of it while route A kept answering. Without the proxy's cap the rule
// set made it buffer the whole answer: 4.3 GB of RSS for one 600 MB answer,
// past the Engine Deployment's 512 MiB limit.
func (e *env) checkResponseCap(t *testing.T, ns, proxy, policy string) {
	t.Helper()
	for _, o := range decodeObjects(t, bigResponseObjects) {
		o.SetNamespace(ns)
		if err := e.c.Create(context.Background(), o); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	e.waitRuleSetReady(t, ns, "big")
	p := &wafv1alpha1.WAFGatewayBindingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: policy}}
	devtest.Update(t, e.c, p, func() { p.Spec.RuleSet.Name = "big" })
	expectVerdicts(t, proxy, "route B under the tenant's big-responses rule set", []verdict{
		{hostB, "q=big-marker", http.StatusForbidden},
		{hostA, "q=hello", http.StatusOK},
	})
	pid := e.proxyPID(t, ns, "edge-waf")
	before := procStatus(t, pid, "VmRSS")

	const size = 600_000_000
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+proxy+"/bytes?n="+strconv.Itoa(size), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = hostB
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the 600 MB answer through the proxy: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the 600 MB answer: status %d, want 200 (ProcessPartial streams the rest)", resp.StatusCode)
	}
	got, err := io.CopyN(io.Discard, resp.Body, 1<<20)
	if err != nil {
		t.Fatalf("the first MiB of the answer: %v after %d bytes", err, got)
	}
	// Route A answers while route B's answer is on its way.
	expectVerdicts(t, proxy, "route A during the 600 MB answer", []verdict{{hostA, "q=hello", http.StatusOK}})
	rest, err := io.Copy(io.Discard, resp.Body)
	if got += rest; err != nil || got != size {
		t.Fatalf("the answer: %d bytes (%v), want %d", got, err, size)
	}
	peak := procStatus(t, pid, "VmHWM")
	t.Logf("waf-proxy RSS before the answer %d MiB, peak after %d MiB", before>>20, peak>>20)
	if peak-before > 128<<20 {
		t.Errorf("the waf-proxy's peak RSS rose by %d MiB for one answer, want at most 128 MiB", (peak-before)>>20)
	}
}

// proxyPID finds the process of the Engine's waf-proxy container on the
// node (this machine): the one whose cgroup names the pod.
func (e *env) proxyPID(t testing.TB, ns, engineName string) int {
	t.Helper()
	sel := "app.kubernetes.io/name=waf-proxy,app.kubernetes.io/instance=" + engine.ChildName(engineName)
	pods, err := e.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the waf-proxy pod: %d pods, %v", len(pods.Items), err)
	}
	uid := string(pods.Items[0].UID)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cg, err := os.ReadFile(filepath.Join(d, "cgroup"))
		if err != nil || (!strings.Contains(string(cg), uid) && !strings.Contains(string(cg), strings.ReplaceAll(uid, "-", "_"))) {
			continue
		}
		if cmd, _ := os.ReadFile(filepath.Join(d, "cmdline")); strings.Contains(string(cmd), "waf-proxy") {
			pid, _ := strconv.Atoi(filepath.Base(d))
			return pid
		}
	}
	t.Fatalf("no waf-proxy process in the cgroup of pod %s", uid)
	return 0
}

// procStatus reads one size field (kB) of /proc/<pid>/status, in bytes.
func procStatus(t testing.TB, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q", field, v)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
