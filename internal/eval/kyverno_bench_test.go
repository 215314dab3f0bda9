//go:build kyverno

package eval_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// kyvernoPolicy is Kyverno's Pod Security Standards restricted level, the
// same checks as Portal's baseline and restricted bundle.
const kyvernoPolicy = `apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: podsecurity-restricted
spec:
  background: true
  rules:
  - name: restricted
    match:
      any:
      - resources:
          kinds: [Pod]
    validate:
      failureAction: Enforce
      podSecurity:
        level: restricted
        version: latest
`

// BenchmarkEvalVsKyverno runs `portal eval -o json` and `kyverno apply` with
// the podSecurity restricted ClusterPolicy on the same 10,000 pods, one core
// each (GOMAXPROCS=1, --jobs 1), in turn, and reports both times and their
// ratio. It fails when the two disagree on which pods violate the policy.
//
// Not part of `make bench` (the build tag keeps it out of ./...): the Kyverno
// CLI is a large build. `make bench-eval-kyverno` builds it from
// hack/tools/kyverno and passes its path in PORTAL_KYVERNO.
func BenchmarkEvalVsKyverno(b *testing.B) {
	const pods = 10_000
	kyverno := os.Getenv("PORTAL_KYVERNO")
	if kyverno == "" {
		b.Fatal("PORTAL_KYVERNO must name the Kyverno CLI: run make bench-eval-kyverno")
	}
	dir := b.TempDir()
	bin, input, rules := cliSetup(b, dir, pods)
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(kyvernoPolicy), 0o600); err != nil {
		b.Fatal(err)
	}
	portalOut, kyvernoOut := filepath.Join(dir, "portal.json"), filepath.Join(dir, "kyverno.json")
	var portalWall, kyvernoWall, portalCPU, kyvernoCPU time.Duration
	for b.Loop() {
		w, c := runOneCore(b, portalOut, bin, "eval", "--rules", rules, "--file", input, "-o", "json", "--jobs", "1")
		portalWall, portalCPU = portalWall+w, portalCPU+c
		w, c = runOneCore(b, kyvernoOut, kyverno, "apply", policy, "--resource", input, "--policy-report", "--output-format", "json")
		kyvernoWall, kyvernoCPU = kyvernoWall+w, kyvernoCPU+c
	}
	b.StopTimer()
	checkReport(b, portalOut, pods)
	portalFail := portalFailures(b, portalOut)
	kyvernoFail, kyvernoPass := kyvernoVerdicts(b, kyvernoOut)
	if len(portalFail) != pods/10 || !slices.Equal(portalFail, kyvernoFail) || len(kyvernoPass)+len(kyvernoFail) != pods {
		b.Fatalf("verdicts differ: Portal fails %d pods, Kyverno fails %d and passes %d", len(portalFail), len(kyvernoFail), len(kyvernoPass))
	}
	n := float64(b.N)
	b.ReportMetric(portalWall.Seconds()/n, "portal-s")
	b.ReportMetric(kyvernoWall.Seconds()/n, "kyverno-s")
	b.ReportMetric(kyvernoWall.Seconds()/portalWall.Seconds(), "x-faster")
	b.ReportMetric(kyvernoCPU.Seconds()/portalCPU.Seconds(), "x-less-cpu")
	b.ReportMetric(pods*n/portalWall.Seconds(), "portal-pods/s")
	b.ReportMetric(pods*n/kyvernoWall.Seconds(), "kyverno-pods/s")
}

// runOneCore runs a command with GOMAXPROCS=1, its standard output to out,
// and returns its wall and CPU time. Exit 1 is a run that found violations.
func runOneCore(b *testing.B, out, name string, args ...string) (wall, cpu time.Duration) {
	f, err := os.Create(out)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.Stdout = f
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err = cmd.Run()
	wall = time.Since(start)
	if code := cmd.ProcessState.ExitCode(); code != 0 && code != 1 {
		b.Fatalf("%s: exit %d (%v): %.2000s", filepath.Base(name), code, err, stderr.String())
	}
	return wall, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// portalFailures lists the pods with a failing result, sorted.
func portalFailures(b *testing.B, path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var rep struct {
		Results []struct {
			Resource struct{ Name string }
			Result   string
		}
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		b.Fatal(err)
	}
	set := map[string]bool{}
	for _, r := range rep.Results {
		if r.Result == "fail" {
			set[r.Resource.Name] = true
		}
	}
	return sortedKeys(set)
}

// kyvernoVerdicts reads the policy reports `kyverno apply -p --output-format
// json` prints (JSON documents, the namespaced ones after "---" lines) and
// lists the failing and passing pods, sorted.
func kyvernoVerdicts(b *testing.B, path string) (fail, pass []string) {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	failing, passing := map[string]bool{}, map[string]bool{}
	for _, chunk := range strings.Split(string(data), "\n") {
		chunk = strings.TrimSpace(chunk)
		if !strings.HasPrefix(chunk, "{") {
			continue
		}
		var rep struct {
			Results []struct {
				Result    string
				Resources []struct{ Name string }
			}
		}
		if err := json.Unmarshal([]byte(chunk), &rep); err != nil {
			b.Fatalf("kyverno report: %v", err)
		}
		for _, r := range rep.Results {
			for _, res := range r.Resources {
				switch r.Result {
				case "fail":
					failing[res.Name] = true
				case "pass":
					passing[res.Name] = true
				default:
					b.Fatalf("kyverno result %q for %s", r.Result, res.Name)
				}
			}
		}
	}
	for name := range failing {
		delete(passing, name)
	}
	return sortedKeys(failing), sortedKeys(passing)
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
