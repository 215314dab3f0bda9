package manifest

import (
	"encoding/json"
	"testing"

	kjson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// podDoc is a typical two-container pod as `kubectl get -o yaml` prints it.
var podDoc = []byte(`apiVersion: v1
kind: Pod
metadata:
  labels:
    app: bench
  name: pod-1
  namespace: bench
spec:
  containers:
  - image: ghcr.io/acme/app-0:1.1
    name: c0
    ports:
    - containerPort: 8080
    securityContext:
      allowPrivilegeEscalation: false
      capabilities:
        drop:
        - ALL
      runAsNonRoot: true
      seccompProfile:
        type: RuntimeDefault
  - image: ghcr.io/acme/app-1:1.1
    name: c1
    ports:
    - containerPort: 8081
    securityContext:
      allowPrivilegeEscalation: false
      capabilities:
        drop:
        - ALL
      runAsNonRoot: true
      seccompProfile:
        type: RuntimeDefault
  securityContext:
    runAsNonRoot: true
    seccompProfile:
      type: RuntimeDefault
  volumes:
  - emptyDir: {}
    name: tmp
`)

// BenchmarkDecode compares Portal's document decoder with sigs.k8s.io/yaml,
// the decoder kubectl uses, on the same pod manifest; and, on the pod as
// indented JSON, with the JSON decoder it stood in for.
func BenchmarkDecode(b *testing.B) {
	b.Run("portal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decode(podDoc, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("sigs.k8s.io-yaml", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m map[string]any
			if err := yaml.Unmarshal(podDoc, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	podJSON := jsonOf(b, podDoc)
	b.Run("portal-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decode(podJSON, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("k8s.io-util-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m map[string]any
			if err := kjson.Unmarshal(podJSON, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// jsonOf is the YAML document doc as indented JSON, as kubectl -o json
// writes it.
func jsonOf(b testing.TB, doc []byte) []byte {
	m, err := decodeYAML(doc)
	if err != nil {
		b.Fatal(err)
	}
	out, err := json.MarshalIndent(m, "", "    ")
	if err != nil {
		b.Fatal(err)
	}
	return out
}
