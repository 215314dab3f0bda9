package manifest

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/reuse"
)

// fastSeeds are documents on both sides of the fast path's limits.
var fastSeeds = []string{
	string(podDoc),
	string(flowPod),
	"a: 1\nb: -2\nc: 0\nd: 007\ne: 1.5\nf: +1\ng: 0x1F\nh: 1_000\ni: 99999999999999999999\n",
	"a: yes\nb: No\nc: on\nd: OFF\ne: ~\nf: null\ng: y\nh: true\ni: nope\nj: .inf\nk: .5\n",
	"a: 'single'\nb: \"double\"\nc: 'it''s'\nd: \"esc\\n\"\ne: ''\nf: \"\"\n",
	"a: {}\nb: []\nc: {x: 1}\nd: [1, 2]\n",
	"a: [ALL]\nb: [NET_RAW, ' x']\nc: {cpu: 50m, memory: 64Mi}\nd: [a,b , c]\ne: [a, ]\nf: {a: 1, a: 2}\ng: [yes, ~, -1, 1.5]\nh: {a: b: c}\ni: {a:b}\nj: [a:b]\nk: [[1]]\nl: { }\nm: [ ]\n",
	"spec: {containers: [{name: c0, image: 'ghcr.io/a:1', ports: [{containerPort: 8080}]}], x: [[1, 2], {}], y: {z: {w: [yes, ~]}}}\n",
	"a: [{a: 1}, {a: b: c}]\nb: {k: [a:b, c: d]}\nc: [a:]\nd: {a: 1,}\ne: [{}, [], '', \"\"]\nf: {a: [1], a: [2]}\ng: [a, [b, {c: d}]] x\nh: [ {a: 1} , [ 2 ] ]\n",
	"list:\n- a\n- b: 1\n  c: 2\n-\n  d: 3\n-\n- - nested\n",
	"list:\n  - a\n  -   b: 1\n      c: 2\nnext: x\n",
	"a:\n  b:\n    c: deep\n  e: f\ng: h\n",
	"a: b # comment\n# full line\nc: d\n",
	"a: &anchor 1\nb: *anchor\nc: !!str 3\n",
	"a: |\n  block\n  text\nb: >\n  folded\n",
	"a: plain\n  continued\n",
	"a: 1\na: 2\n",
	"y: 1\n1: a\n\"q\": 1\n<<: {}\n? complex\n: key\n",
	"a: b: c\nd: e:\n",
	"a: 50m\nb: 64Mi\nc: 1.25\nd: 2.3.0\ne: 1e3\nf: 2001-12-14\ng: 0b101\nh: 3/4\ni: -foo\nj: 1_0\nk: 12:30\nl: 0o17\nm: 1Gi\n",
	"a: {cpu: \"1\", memory: '2'}\nb: [\"sleep\", \"infinity\"]\nc: [\"a,b\"]\nd: ['x', \"y\" ]\ne: {\"k\": v}\nf: [\"a\"b\"]\ng: {a: 'b'c'}\n",
	"a: x]\nb: x,y\nc: a:b\nd: http://x/y?z=1&w=2\ne: <<\nf: =\n",
	"a:\tb\n",
	"a: é\n",
	"  indented: top\n  level: mapping\n",
	"a:\n  b: 1\n c: 2\n",
	"- top\n- level\n",
	"scalar\n",
	"a: 1\n...\n",
	"a: 1\n--- \nb: 2\n",
	"",
	"# only a comment\n",
	"a: [unclosed\n",
	"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: p\n",
}

// fastScalars are values whose YAML 1.1 type the fast path must get right
// or leave to the parser.
var fastScalars = []string{
	"1", "-2", "0", "007", "1.5", "+1", "0x1F", "0o17", "0b101", "1_000", "99999999999999999999", "999999999999999999",
	"yes", "No", "on", "OFF", "y", "n", "Y", "N", "true", "False", "TRUE", "~", "null", "Null", "NULL", "nope", "yesno", "o", "onion",
	".inf", "-.inf", ".nan", ".5", "1e3", "-1e3", "2001-12-14", "2001-12-14t21:59:43.10-05:00", "12:30", "1:2:3", "50m", "64Mi", "1Gi",
	"3/4", "-foo", "-", "--", "2.3.0", "1.25", "v1", "<<", "=", "'q'", "\"q\"", "''", "\"\"", "a b", "a:b", "http://x/y?z=1&w=2",
	"a]", "a,b", "!tag", "&a", "*a", "@x", "%x", "`x", "|", ">", "?", "? x", ": x", "#x", "a #b", "a#b",
}

// FuzzFastDecode holds the fast path to the general parser: whatever it
// accepts, the general parser accepts and reads the same.
func FuzzFastDecode(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add(s)
	}
	for _, v := range fastScalars {
		f.Add("k: " + v + "\n")
		f.Add("l:\n- " + v + "\n")
		f.Add("f: [" + v + "]\n")
		f.Add("m: {k: " + v + "}\n")
		f.Add(v + ": k\n")
	}
	f.Fuzz(func(t *testing.T, doc string) {
		got, ok := fastDecode([]byte(doc), nil)
		if !ok {
			return
		}
		want, err := decodeYAML([]byte(doc))
		if err != nil {
			t.Fatalf("fast path read %q as %v, the YAML parser rejects it: %v", doc, got, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("fast path read %q as\n%#v\nthe YAML parser as\n%#v", doc, got, want)
		}
		decodesThroughAPool(t, fastDecode, doc, want)
	})
}

// decodesThroughAPool checks that decode reads doc as want into the maps
// and lists other documents were decoded into and handed back, as portal
// eval's workers decode, twice.
func decodesThroughAPool(t *testing.T, decode func([]byte, *reuse.Pool) (map[string]any, bool), doc string, want map[string]any) {
	t.Helper()
	p := usedPool(t)
	for range 2 {
		got, ok := decode([]byte(doc), p)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("fast path read %q from a pool as\n%#v (ok %v), not as\n%#v", doc, got, ok, want)
		}
		p.Release(got)
	}
}

// usedPool is a reuse.Pool that holds the maps and lists of a pod and of
// flow collections, handed back after decoding.
func usedPool(t *testing.T) *reuse.Pool {
	t.Helper()
	p := new(reuse.Pool)
	for _, doc := range [][]byte{podDoc, flowPod} {
		m, ok := fastDecode(doc, p)
		if !ok {
			t.Fatalf("fast path refused %s", doc)
		}
		p.Release(m)
	}
	return p
}

// TestFastDecodeCoversGeneratedYAML checks that the fast path, not the
// general parser, reads what generators write: a kubectl-style pod and the
// example manifests. Without it the fast path could fall back on everything
// and no other test would notice.
func TestFastDecodeCoversGeneratedYAML(t *testing.T) {
	docs := Split("pod.yaml", podDoc)
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "manifests", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("example manifests: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, Split(f, data)...)
	}
	fast := 0
	for _, d := range docs {
		got, ok := fastDecode(d.Data, nil)
		if !ok {
			continue
		}
		fast++
		want, err := decodeYAML(d.Data)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:%d: fast path and YAML parser disagree (%v)", d.Path, d.Line, err)
		}
	}
	if fast*2 < len(docs) {
		t.Fatalf("the fast path read %d of %d documents, want most", fast, len(docs))
	}
}

// TestFastDecodeDepth: nesting past maxFastDepth leaves the fast path (and
// its recursion) for the general parser, which still reads the document.
func TestFastDecodeDepth(t *testing.T) {
	var doc []byte
	for i := range maxFastDepth + 1 {
		doc = append(doc, strings.Repeat(" ", i)...)
		doc = append(doc, "a:\n"...)
	}
	if _, ok := fastDecode(doc, nil); ok {
		t.Fatal("the fast path read a document nested past its depth limit")
	}
	if _, err := decode(doc, nil); err != nil {
		t.Fatalf("deep document no longer decodes: %v", err)
	}
	if _, ok := fastDecode(doc[:bytes.LastIndex(doc[:len(doc)-1], []byte("\n"))+1], nil); !ok {
		t.Fatal("the fast path refused a document at its depth limit")
	}
}

// flowPod is podDoc with its values in flow style, as YAML emitters set
// to flow style (and people writing compact manifests) write them.
var flowPod = []byte(`apiVersion: v1
kind: Pod
metadata: {labels: {app: bench}, name: pod-1, namespace: bench}
spec: {containers: [{image: ghcr.io/acme/app-0:1.1, name: c0, ports: [{containerPort: 8080}], securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}, runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}}, {image: 'ghcr.io/acme/app-1:1.1', name: c1}], securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}, volumes: [{emptyDir: {}, name: tmp}]}
`)

// TestFastDecodeCoversFlowStyle: nested flow collections are read by the
// fast path, as the general parser reads them.
func TestFastDecodeCoversFlowStyle(t *testing.T) {
	got, ok := fastDecode(flowPod, nil)
	if !ok {
		t.Fatal("the fast path refused a flow-style pod")
	}
	want, err := decodeYAML(flowPod)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("fast path and YAML parser disagree (%v):\n%v\n%v", err, got, want)
	}
}
