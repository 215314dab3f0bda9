package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/vilaca/portal/internal/sink/alertmanager/amtest"
)

// falcoCurl is the line portal dev --runtime prints to post a Falco alert:
// the CA, the token file and the URL; falcoPod the line
// before, naming the pod the alert is about.
var (
	falcoCurl = regexp.MustCompile(`curl -fsS --cacert (\S+) -H "Authorization: Bearer \$\(cat (\S+)\)" --data-binary @\S+ (https://\S+/falco)`)
	falcoPod  = regexp.MustCompile(`an alert naming pod demo/(\S+) quarantines it`)
)

// falcoHint is what the test reads of portal dev's Falco hint.
type falcoHint struct {
	line           string // the curl command, as printed
	ca, token, url string
	pod            string // the pod the printed alert names
}

// parseFalcoHint reads the printed curl line; relative paths are relative
// to dir, where portal dev runs.
func parseFalcoHint(dir, pod, curl string) falcoHint {
	m := falcoCurl.FindStringSubmatch(curl)
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	return falcoHint{line: strings.TrimSpace(curl), ca: abs(m[1]), token: abs(m[2]), url: m[3], pod: pod}
}

// falcoAlertQuarantines: Falco alerts in Falco's JSON output posted to
// /falco with the credentials portal dev prints quarantine the pods they
// name on the real node: the cookbook's falco-quarantine rule labels each
// pod, applies a NetworkPolicy that selects it and denies all its traffic,
// and raises PortalFalcoQuarantine in the real Alertmanager. One alert is
// portal dev's own, posted by the printed curl line as pasted; the other a
// recorded alert of Falco's "Terminal shell in container" rule, its pod
// fields pointed at the other demo/hello pod.
func falcoAlertQuarantines(t *testing.T, root, kubectl, kubeconfig string, am *amtest.Server, h falcoHint) {
	t.Helper()
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig, "-n", "demo"}, args...)...).Output()
		if err != nil {
			t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	pods := strings.Fields(run("get", "pods", "-l", "app.kubernetes.io/name=hello", "-o", "jsonpath={.items[*].metadata.name}"))
	if len(pods) != 2 || !slices.Contains(pods, h.pod) {
		t.Fatalf("the Falco hint names pod %q, the demo/hello pods are %v", h.pod, pods)
	}
	other := pods[0]
	if other == h.pod {
		other = pods[1]
	}

	// portal dev's line, as a user pastes it.
	curl := exec.Command("bash", "-c", h.line)
	curl.Dir = root
	if out, err := curl.CombinedOutput(); err != nil {
		t.Fatalf("the printed curl line: %v\n%s", err, out)
	}

	// The recorded alert, as Falco's http_output posts it.
	ctr := run("get", "pod", other, "-o", "jsonpath={.status.containerStatuses[0].containerID}")
	_, id, _ := strings.Cut(ctr, "://")
	if len(id) < 12 {
		t.Fatalf("pod %s: container ID %q", other, ctr)
	}
	postFalco(t, h, recordedAlert(t, root, other, id[:12]))

	for _, pod := range []string{h.pod, other} {
		podQuarantined(t, run, pod)
		poll(t, "alert PortalFalcoQuarantine for pod "+pod+" in Alertmanager", func() bool {
			as, err := am.Alerts("demo")
			if err != nil {
				return false
			}
			return slices.ContainsFunc(as, func(a amtest.Alert) bool {
				return a.Labels["alertname"] == "PortalFalcoQuarantine" && a.Labels["rule"] == "falco-quarantine" && a.Labels["name"] == pod
			})
		})
	}
}

// recordedAlert is internal/runtime/testdata/falco/terminal-shell.json (a
// Falco alert about pod prod/web-0) about container id of pod demo/pod,
// raised now.
func recordedAlert(t *testing.T, root, pod, id string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "internal", "runtime", "testdata", "falco", "terminal-shell.json"))
	if err != nil {
		t.Fatal(err)
	}
	var a map[string]any
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	f := a["output_fields"].(map[string]any)
	out := strings.NewReplacer("k8s_ns=prod", "k8s_ns=demo", "k8s_pod_name=web-0", "k8s_pod_name="+pod,
		"container_id="+f["container.id"].(string), "container_id="+id, "container_name=web", "container_name=hello",
		"10:20:05.408091526", now.Format("15:04:05.000000000"))
	a["output"] = out.Replace(a["output"].(string))
	a["time"] = now.Format(time.RFC3339Nano)
	f["k8s.ns.name"], f["k8s.pod.name"], f["container.id"], f["container.name"] = "demo", pod, id, "hello"
	f["evt.time"] = now.UnixNano()
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// postFalco posts alert to the hint's URL with its CA and token.
func postFalco(t *testing.T, h falcoHint, alert []byte) {
	t.Helper()
	caPEM, err := os.ReadFile(h.ca)
	if err != nil {
		t.Fatal(err)
	}
	token, err := os.ReadFile(h.token)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("%s: no certificate", h.ca)
	}
	req, err := http.NewRequest(http.MethodPost, h.url, bytes.NewReader(alert))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", h.url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d, want 200", h.url, resp.StatusCode)
	}
}

// podQuarantined waits until demo/pod carries portal.io/falco-alert=true
// and is selected by Portal's quarantine NetworkPolicy, which denies all
// its ingress and egress.
func podQuarantined(t *testing.T, run func(...string) string, pod string) {
	t.Helper()
	poll(t, "pod demo/"+pod+" labelled portal.io/falco-alert=true", func() bool {
		return run("get", "pod", pod, "-o", "jsonpath={.metadata.labels.portal\\.io/falco-alert}") == "true"
	})
	poll(t, "pod demo/"+pod+" selected by a quarantine NetworkPolicy", func() bool {
		var pl struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		var nps networkingv1.NetworkPolicyList
		if json.Unmarshal([]byte(run("get", "pod", pod, "-o", "json")), &pl) != nil ||
			json.Unmarshal([]byte(run("get", "networkpolicies", "-o", "json")), &nps) != nil {
			return false
		}
		for _, np := range nps.Items {
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil || np.Annotations["portal.io/quarantine-of"] != "Pod/"+pod {
				continue
			}
			denyAll := len(np.Spec.Ingress) == 0 && len(np.Spec.Egress) == 0 &&
				slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) && slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
			if sel.Matches(labels.Set(pl.Metadata.Labels)) && denyAll {
				return true
			}
		}
		return false
	})
}
