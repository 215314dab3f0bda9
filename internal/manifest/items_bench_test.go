package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"sigs.k8s.io/yaml"
)

// BenchmarkStreamItems is the one goroutine of `portal eval` that reads:
// cutting 1,000 pods into documents, as a JSON List (`kubectl get -o
// json`), as JSON lines and as block YAML separated by `---`. Every worker waits on it,
// so its pods/s is the most any number of jobs can evaluate.
func BenchmarkStreamItems(b *testing.B) {
	const pods = 1000
	obj, err := yaml.YAMLToJSON(podDoc)
	if err != nil {
		b.Fatal(err)
	}
	var pod map[string]any
	if err := json.Unmarshal(obj, &pod); err != nil {
		b.Fatal(err)
	}
	items := make([]any, pods)
	var block, lines bytes.Buffer
	for i := range items {
		items[i] = pod
		fmt.Fprintf(&block, "---\n%s", podDoc)
		fmt.Fprintf(&lines, "%s\n", obj)
	}
	list, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items}, "", "    ")
	if err != nil {
		b.Fatal(err)
	}
	for _, in := range []struct {
		name string
		data []byte
	}{{"json-list", list}, {"json-lines", lines.Bytes()}, {"block-yaml", block.Bytes()}} {
		b.Run(in.name, func(b *testing.B) {
			b.SetBytes(int64(len(in.data)))
			for b.Loop() {
				n := 0
				for doc, err := range StreamItems([]string{"-"}, bytes.NewReader(in.data)) {
					if err != nil || doc.err != nil {
						b.Fatal(err, doc.err)
					}
					n++
				}
				if n < pods {
					b.Fatalf("%d documents, want at least %d", n, pods)
				}
			}
			b.ReportMetric(float64(pods*b.N)/b.Elapsed().Seconds(), "pods/s")
		})
	}
}
