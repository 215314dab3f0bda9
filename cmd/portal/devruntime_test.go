//go:build !portal_nodev

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestDevFalcoAlertQuarantines: the alert portal dev's hint posts to
// /falco, replayed with `portal eval --events`, makes the cookbook's
// falco-quarantine rule fail on the pod it names, and carries the
// container ID as Falco shortens it.
func TestDevFalcoAlertQuarantines(t *testing.T) {
	pod := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "hello-7d4b9c-x2x9q", UID: "u1"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "hello", Image: "hello"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "hello", ContainerID: "containerd://90f6a8a8c8d1e2f3a4b5c6d7e8f9"}}},
	}
	alert := devFalcoAlert(pod, time.Now())
	if id := alert.OutputFields["container.id"]; id != "90f6a8a8c8d1" {
		t.Errorf("container.id %v, want the container's first 12 characters", id)
	}
	dir := t.TempDir()
	line, err := json.Marshal(alert)
	if err != nil {
		t.Fatal(err)
	}
	state, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	events, cluster := filepath.Join(dir, "falco.log"), filepath.Join(dir, "cluster.yaml")
	if err := os.WriteFile(events, append(line, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cluster, state, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "", "eval", "--rules", "../../examples/rules/runtime/falco-quarantine.yaml", "--events", events,
		"--cluster-state", cluster, "-o", "json")
	if code := exitCodeOf(err); code != exitViolation {
		t.Fatalf("exit code %d, want %d (%v)\n%s", code, exitViolation, err, out)
	}
	var h runtimeHit
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if h.Rule != "falco-quarantine" || h.Object.Namespace != "demo" || h.Object.Name != pod.Name {
		t.Errorf("finding %s on %s/%s, want falco-quarantine on demo/%s", h.Rule, h.Object.Namespace, h.Object.Name, pod.Name)
	}
}
