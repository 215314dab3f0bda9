package clustercache

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// podJSON is a pod as the API server returns it: the audit benchmark's
// compliant pod with the server's defaults, status and managedFields.
const podJSON = `{"apiVersion":"v1","kind":"Pod","metadata":{
 "name":"bench-00042","namespace":"bench-3","uid":"6f0c3c1e-94b1-4a57-9a0b-0d2b7c1f6a42",
 "resourceVersion":"48213","creationTimestamp":"2025-01-01T00:00:00Z",
 "labels":{"app.kubernetes.io/name":"bench","team":"platform"},
 "annotations":{"note":"a <b> & c","unicode":"ação"},
 "managedFields":[{"manager":"bench","operation":"Update","apiVersion":"v1","time":"2025-01-01T00:00:00Z","fieldsType":"FieldsV1",
  "fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:app.kubernetes.io/name":{},"f:team":{}}},
   "f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:imagePullPolicy":{},"f:name":{},
    "f:ports":{".":{},"k:{\"containerPort\":8080,\"protocol\":\"TCP\"}":{".":{},"f:containerPort":{},"f:name":{},"f:protocol":{}}}}}}}}]},
"spec":{
 "initContainers":[{"name":"init","image":"registry.example/app-init:1.0","command":["/bin/migrate","--once"],
  "env":[{"name":"LOG_LEVEL","value":"info"}],
  "resources":{"limits":{"memory":"128Mi"},"requests":{"cpu":"50m","memory":"64Mi"}},
  "volumeMounts":[{"name":"tmp","mountPath":"/tmp"}],"terminationMessagePath":"/dev/termination-log",
  "terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent",
  "securityContext":{"capabilities":{"drop":["ALL"]},"readOnlyRootFilesystem":true,"allowPrivilegeEscalation":false}}],
 "containers":[
  {"name":"app","image":"registry.example/app:1.0","ports":[{"name":"http","containerPort":8080,"protocol":"TCP"}],
   "env":[{"name":"LOG_LEVEL","value":"info"}],
   "resources":{"limits":{"memory":"128Mi"},"requests":{"cpu":"50m","memory":"64Mi"}},
   "volumeMounts":[{"name":"tmp","mountPath":"/tmp"}],
   "livenessProbe":{"httpGet":{"path":"/healthz","port":8080,"scheme":"HTTP"},"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3},
   "readinessProbe":{"httpGet":{"path":"/healthz","port":8080,"scheme":"HTTP"},"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3},
   "terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent",
   "securityContext":{"capabilities":{"drop":["ALL"]},"readOnlyRootFilesystem":true,"allowPrivilegeEscalation":false}},
  {"name":"proxy","image":"registry.example/proxy:1.0","ports":[{"name":"proxy","containerPort":9090,"protocol":"TCP"}],
   "resources":{"limits":{"memory":"128Mi"},"requests":{"cpu":"50m","memory":"64Mi"}},
   "terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent",
   "securityContext":{"capabilities":{"drop":["ALL"]},"readOnlyRootFilesystem":true,"allowPrivilegeEscalation":false}}],
 "volumes":[{"name":"tmp","emptyDir":{}}],
 "restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst",
 "securityContext":{"runAsUser":10001,"runAsGroup":10001,"runAsNonRoot":true,"fsGroup":10001,"seccompProfile":{"type":"RuntimeDefault"}},
 "schedulerName":"default-scheduler","enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority","priority":0,
 "tolerations":[{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300},
  {"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}]},
"status":{"phase":"Pending","qosClass":"Burstable"}}`

// podVariant is the i-th pod of a realistic set: podJSON with its own
// identity and timestamps, and a few images and violations as in the audit
// benchmark, so that pods share much but not all of their JSON.
func podVariant(t testing.TB, i int) *unstructured.Unstructured {
	t.Helper()
	u := decodeJSON(t, podJSON)
	u.SetName(fmt.Sprintf("pod-%05d", i))
	u.SetNamespace(fmt.Sprintf("bench-%d", i%7))
	u.SetUID(types.UID(fmt.Sprintf("%08x-94b1-4a57-%04x-%012x", i*2654435761%(1<<32), i%65536, i*104729)))
	u.SetResourceVersion(strconv.Itoa(48213 + 3*i))
	u.SetCreationTimestamp(metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * 1237 * time.Millisecond)))
	containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "containers")
	app := containers[0].(map[string]any)
	app["image"] = fmt.Sprintf("registry.example/app:1.%d", i%5)
	switch i % 4 {
	case 1:
		_ = unstructured.SetNestedField(u.Object, true, "spec", "hostPID")
	case 2:
		_ = unstructured.SetNestedStringSlice(app, []string{"SYS_ADMIN"}, "securityContext", "capabilities", "add")
	}
	_ = unstructured.SetNestedSlice(u.Object, containers, "spec", "containers")
	return u
}

// decodeJSON decodes an object as the dynamic client does.
func decodeJSON(t testing.TB, data string) *unstructured.Unstructured {
	t.Helper()
	obj, err := runtime.Decode(unstructured.UnstructuredJSONScheme, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*unstructured.Unstructured)
}

// roundTrip compacts the decoded data and decodes it again; it also returns
// what it should decode to.
func roundTrip(t *testing.T, data string) (got, want *unstructured.Unstructured, c *Object) {
	t.Helper()
	want = decodeJSON(t, data)
	unstructured.RemoveNestedField(want.Object, "metadata", "managedFields")
	c = compact(decodeJSON(t, data), new(dictionary))
	if c.err != nil {
		t.Fatal(c.err)
	}
	got, err := c.decode()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Object, want.Object) {
		t.Fatalf("round trip changed the object:\ngot  %#v\nwant %#v", got.Object, want.Object)
	}
	return got, want, c
}

func TestCompactPodRoundTrip(t *testing.T) {
	got, want, c := roundTrip(t, podJSON)
	if _, found, _ := unstructured.NestedFieldNoCopy(got.Object, "metadata", "managedFields"); found {
		t.Error("decoded object has managedFields")
	}
	ports, _, _ := unstructured.NestedSlice(got.Object, "spec", "containers")
	port := ports[0].(map[string]any)["ports"].([]any)[0].(map[string]any)["containerPort"]
	if _, ok := port.(int64); !ok {
		t.Errorf("containerPort is a %T, want int64", port)
	}
	nonRoot, _, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "securityContext", "runAsNonRoot")
	if nonRoot != true {
		t.Errorf("runAsNonRoot = %#v", nonRoot)
	}
	if got.GetNamespace() != "bench-3" || got.GetName() != "bench-00042" || got.GetLabels()["team"] != "platform" {
		t.Errorf("metadata: %v/%v %v", got.GetNamespace(), got.GetName(), got.GetLabels())
	}
	// Each evaluation owns its object: a second decode shares nothing,
	// neither maps nor the pooled buffers' bytes.
	again, _ := c.decode()
	got.SetName("changed")
	if again.GetName() != "bench-00042" {
		t.Error("decodes share their maps")
	}
	other := compact(podVariant(t, 7), c.dict)
	if _, err := other.decode(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again.Object, want.Object) {
		t.Error("a later decode changed an earlier one's object")
	}
}

// TestCompactSize checks that a realistic pod is cached deflated, against a
// dictionary of its kind or, less so, of another.
func TestCompactSize(t *testing.T) {
	u := podVariant(t, 1)
	unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
	jsonSize := len(mustJSON(t, u.Object))

	pods := new(dictionary)
	if c := compact(podVariant(t, 0), pods); c.err != nil {
		t.Fatal(c.err)
	}
	c := compact(podVariant(t, 1), pods)
	if c.err != nil {
		t.Fatal(c.err)
	}
	if len(c.deflated)*8 > jsonSize {
		t.Errorf("deflated against another pod: %d bytes of %d bytes of JSON", len(c.deflated), jsonSize)
	}
	if cap(c.deflated) != len(c.deflated) {
		t.Errorf("deflated has spare capacity: %d of %d", len(c.deflated), cap(c.deflated))
	}
	againstPod := len(c.deflated)

	others := new(dictionary)
	if c := compact(decodeJSON(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"k":"v"}}`), others); c.err != nil {
		t.Fatal(c.err)
	}
	c = compact(podVariant(t, 1), others)
	if c.err != nil {
		t.Fatal(c.err)
	}
	if len(c.deflated)*2 > jsonSize {
		t.Errorf("deflated against a ConfigMap: %d bytes of %d bytes of JSON", len(c.deflated), jsonSize)
	}
	t.Logf("pod: %d bytes of JSON, deflated %d against a pod and %d against a ConfigMap", jsonSize, againstPod, len(c.deflated))
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCompactDictionary checks that the first object fixes the dictionary
// and that every later one, whatever its kind, decodes against it.
func TestCompactDictionary(t *testing.T) {
	d := new(dictionary)
	first := compact(podVariant(t, 0), d)
	dict := bytes.Clone(d.data)
	if len(dict) == 0 || first.dict != d {
		t.Fatalf("dictionary not set by the first object: %d bytes", len(dict))
	}
	thing := `{"apiVersion":"example.com/v1","kind":"Thing","metadata":{"name":"t","namespace":"n"},"spec":{"x":[1,2.5,"s"]}}`
	later := []*unstructured.Unstructured{podVariant(t, 1), decodeJSON(t, thing), podVariant(t, 2)}
	for _, u := range later {
		want := u.DeepCopy()
		unstructured.RemoveNestedField(want.Object, "metadata", "managedFields")
		c := compact(u, d)
		got, err := c.decode()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Object, want.Object) {
			t.Errorf("%s changed in the round trip", want.GetName())
		}
	}
	if !bytes.Equal(d.data, dict) {
		t.Error("a later object changed the dictionary")
	}
	if got, err := first.decode(); err != nil || got.GetName() != "pod-00000" {
		t.Errorf("first object = %v, %v", got, err)
	}
}

// TestCompactCorrupt checks that a cached form that does not inflate is
// reported by decode, naming the object, rather than decoded as something
// else.
func TestCompactCorrupt(t *testing.T) {
	c := compact(decodeJSON(t, podJSON), new(dictionary))
	for _, deflated := range [][]byte{nil, c.deflated[:len(c.deflated)/2], {0xff, 0xff, 0xff}} {
		bad := *c
		bad.deflated = deflated
		if _, err := bad.decode(); err == nil || !strings.Contains(err.Error(), "bench-3/bench-00042") {
			t.Errorf("decode of %x = %v", deflated, err)
		}
	}
	if _, err := c.decode(); err != nil {
		t.Errorf("a failed decode broke a pooled decoder: %v", err)
	}
}

// TestCompactConcurrent compacts and decodes with one dictionary from many
// goroutines, as the informers and evaluation workers do; run it with -race.
func TestCompactConcurrent(t *testing.T) {
	d := new(dictionary)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g * 50; i < (g+1)*50; i++ {
				want := fmt.Sprintf("pod-%05d", i)
				got, err := compact(podVariant(t, i), d).decode()
				if err != nil || got.GetName() != want {
					t.Errorf("decoded %v, %v; want %s", got.GetName(), err, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestCompactNumbers checks that every number comes back with the type the
// dynamic client gave it, which rules can observe.
func TestCompactNumbers(t *testing.T) {
	got, _, _ := roundTrip(t, `{"apiVersion":"example.com/v1","kind":"Thing","metadata":{"name":"n"},
	 "spec":{"int":42,"neg":-5,"big":9007199254740993,"maxInt":9223372036854775807,"zeroInt":0,
	  "ratio":2.5,"wholeFloat":3.0,"negZero":-0.0,"tiny":1e-7,"huge":1e21,"beyondInt":1e19,
	  "yes":true,"no":false,"none":null,"str":"x",
	  "lists":[[1,2.0,"a",[true,{"deep":[4.5,6,7.0]}]],[]],"empty":{}}}`)
	spec := got.Object["spec"].(map[string]any)
	for field, want := range map[string]any{
		"int": int64(42), "neg": int64(-5), "big": int64(9007199254740993), "maxInt": int64(math.MaxInt64), "zeroInt": int64(0),
		"ratio": 2.5, "wholeFloat": 3.0, "negZero": math.Copysign(0, -1), "tiny": 1e-7, "huge": 1e21, "beyondInt": 1e19,
		"yes": true, "no": false, "none": nil, "str": "x",
	} {
		if v := spec[field]; v != want || reflect.TypeOf(v) != reflect.TypeOf(want) {
			t.Errorf("%s = %#v (%T), want %#v (%T)", field, v, v, want, want)
		}
	}
	if !math.Signbit(spec["negZero"].(float64)) {
		t.Error("-0.0 lost its sign")
	}
	deep := spec["lists"].([]any)[0].([]any)
	if _, ok := deep[1].(float64); !ok {
		t.Errorf("2.0 in a list is a %T", deep[1])
	}
	inner := deep[3].([]any)[1].(map[string]any)["deep"].([]any)
	if _, ok := inner[2].(float64); !ok {
		t.Errorf("7.0 in a nested list is a %T", inner[2])
	}
}

func TestCompactMeta(t *testing.T) {
	c := compact(decodeJSON(t, podJSON), new(dictionary))
	m, err := meta.Accessor(c)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetNamespace() != "bench-3" || m.GetName() != "bench-00042" || m.GetUID() != types.UID("6f0c3c1e-94b1-4a57-9a0b-0d2b7c1f6a42") || m.GetResourceVersion() != "48213" {
		t.Errorf("meta = %v/%v %v %v", m.GetNamespace(), m.GetName(), m.GetUID(), m.GetResourceVersion())
	}
	if len(m.GetManagedFields()) != 0 || len(m.GetLabels()) != 0 {
		t.Error("the cached meta holds more than the identity")
	}
	if gvk := c.GetObjectKind().GroupVersionKind(); gvk != (schema.GroupVersionKind{Version: "v1", Kind: "Pod"}) {
		t.Errorf("gvk = %v", gvk)
	}
	key, err := cache.MetaNamespaceKeyFunc(c)
	if err != nil || key != "bench-3/bench-00042" {
		t.Errorf("key = %q, %v", key, err)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: key, Obj: c}
	if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(tomb); err != nil || k != key {
		t.Errorf("tombstone key = %q, %v", k, err)
	}
	cp := c.DeepCopyObject().(*Object)
	if !sameVersion(c, cp) {
		t.Error("a copy is not the same version")
	}
	cp.SetResourceVersion("48214")
	cp.SetName("other")
	if sameVersion(c, cp) || c.GetName() != "bench-00042" || c.GetResourceVersion() != "48213" {
		t.Error("the copy's meta is not its own")
	}
	if &cp.deflated[0] != &c.deflated[0] || cp.dict != c.dict {
		t.Error("the copy does not share the immutable JSON and its dictionary")
	}
}

func TestCompactTransform(t *testing.T) {
	var logs bytes.Buffer
	transform := compactTransform(slog.New(slog.NewTextHandler(&logs, nil)), "pods")
	out, err := transform(decodeJSON(t, podJSON))
	c, ok := out.(*Object)
	if err != nil || !ok {
		t.Fatalf("transform = %T, %v", out, err)
	}
	// Idempotent: a watch-list transforms its initial objects twice.
	if again, err := transform(c); err != nil || again != any(c) {
		t.Errorf("second transform = %p, %v; want the same object", again, err)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "bench-3/bench-00042", Obj: c}
	if out, err := transform(tomb); err != nil || out != any(tomb) {
		t.Errorf("tombstone transformed to %#v, %v", out, err)
	}

	// JSON cannot hold NaN: the object is cached with the error, logged,
	// and its evaluation reports it.
	bad := decodeJSON(t, podJSON)
	if err := unstructured.SetNestedField(bad.Object, math.NaN(), "spec", "weight"); err != nil {
		t.Fatal(err)
	}
	out, err = transform(bad)
	if err != nil {
		t.Fatalf("transform failed: %v", err)
	}
	bc := out.(*Object)
	if bc.GetName() != "bench-00042" {
		t.Errorf("failed object has no identity: %q", bc.GetName())
	}
	if _, err := bc.decode(); err == nil || !strings.Contains(err.Error(), "bench-3/bench-00042") {
		t.Errorf("decode error = %v", err)
	}
	if !strings.Contains(logs.String(), "not cached compact") {
		t.Errorf("not logged: %q", logs.String())
	}
}

// noWatchList makes the reflector list then watch, as with a client
// without watch-list support.
type noWatchList struct{}

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// TestCompactInformer runs a client-go informer with the transform, with a
// list then a watch and with a watch-list (whose initial objects the
// reflector transforms twice), and checks what the cache and the handlers
// see.
func TestCompactInformer(t *testing.T) {
	for _, watchList := range []bool{false, true} {
		t.Run(map[bool]string{false: "list", true: "watchlist"}[watchList], func(t *testing.T) {
			testCompactInformer(t, watchList)
		})
	}
}

func testCompactInformer(t *testing.T, watchList bool) {
	pod := func(rv, image string) *unstructured.Unstructured {
		u := decodeJSON(t, podJSON)
		u.SetResourceVersion(rv)
		_ = unstructured.SetNestedField(u.Object, image, "status", "image")
		return u
	}
	fw := watch.NewFakeWithChanSize(10, false)
	var client any = noWatchList{}
	if watchList {
		client = nil
		fw.Add(pod("10", "a"))
		bm := &unstructured.Unstructured{}
		bm.SetResourceVersion("10")
		bm.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		fw.Action(watch.Bookmark, bm)
	}
	var once sync.Once
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			l := &unstructured.UnstructuredList{Items: []unstructured.Unstructured{*pod("10", "a")}}
			l.SetResourceVersion("10")
			return l, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			w := watch.Interface(watch.NewFake())
			once.Do(func() { w = fw })
			return w, nil
		},
	}, client)
	inf := cache.NewSharedIndexInformerWithOptions(lw, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{})
	if err := inf.SetTransform(compactTransform(slog.New(slog.NewTextHandler(io.Discard, nil)), "pods")); err != nil {
		t.Fatal(err)
	}
	events := make(chan string, 10)
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { events <- "add " + obj.(*Object).GetResourceVersion() },
		UpdateFunc: func(o, n any) {
			events <- "update " + o.(*Object).GetResourceVersion() + "->" + n.(*Object).GetResourceVersion()
		},
		DeleteFunc: func(obj any) {
			key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
			if err != nil {
				t.Error(err)
			}
			events <- "delete " + key
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		t.Fatal("informer did not sync")
	}
	next := func(want string) {
		t.Helper()
		select {
		case got := <-events:
			if got != want {
				t.Fatalf("event %q, want %q", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("no event, want %q", want)
		}
	}
	next("add 10")
	fw.Modify(pod("11", "b"))
	next("update 10->11")
	item, ok, err := inf.GetStore().GetByKey("bench-3/bench-00042")
	if !ok || err != nil {
		t.Fatalf("not cached: %v", err)
	}
	obj, err := item.(*Object).decode()
	if err != nil {
		t.Fatal(err)
	}
	if image, _, _ := unstructured.NestedString(obj.Object, "status", "image"); image != "b" {
		t.Errorf("cached image = %q, want the update's", image)
	}
	fw.Delete(pod("12", "b"))
	next("delete bench-3/bench-00042")
}

// FuzzCachedRoundTrip checks that any JSON object comes back from the cache
// as the dynamic client decoded it, against a dictionary of its own and
// against a pod's.
func FuzzCachedRoundTrip(f *testing.F) {
	for _, seed := range []string{
		podJSON,
		`{}`,
		`{"metadata":{"managedFields":[{"manager":"m"}],"name":"n"}}`,
		`{"metadata":"not a map","kind":7,"apiVersion":null}`,
		`{"n":[0,-0.0,1.0,1e20,1e21,9223372036854775807,9223372036854775808,-9223372036854775808,5e-324,1.7976931348623157e308]}`,
		`{"s":"\u003c\u0026\u003e \ud83d\ude00 \u0000 \"\\ ação","":{"":[[],{}]}}`,
		`{"a":1,"a":2.5}`,
	} {
		f.Add([]byte(seed))
	}
	pods := new(dictionary)
	if c := compact(decodeJSON(f, podJSON), pods); c.err != nil {
		f.Fatal(c.err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want map[string]any
		if err := utiljson.Unmarshal(data, &want); err != nil || want == nil {
			return // not a JSON object: nothing to round-trip
		}
		if md, ok := want["metadata"].(map[string]any); ok {
			delete(md, "managedFields")
		}
		for _, d := range []*dictionary{new(dictionary), pods} {
			var in map[string]any
			if err := utiljson.Unmarshal(data, &in); err != nil {
				t.Fatal(err)
			}
			c := compact(&unstructured.Unstructured{Object: in}, d)
			if c.err != nil {
				t.Fatalf("compact: %v", c.err)
			}
			got, err := c.decode()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Object, want) {
				t.Fatalf("round trip changed the object:\ngot  %#v\nwant %#v", got.Object, want)
			}
		}
	})
}

// A tenant's object with thousands of labels is held deflated, not as a
// flat copy of every label, and selectors still match it.
func TestCompactBigLabels(t *testing.T) {
	u := decodeJSON(t, podJSON)
	many := map[string]string{}
	for i := range 5000 {
		many[fmt.Sprintf("label-%05d", i)] = "value"
	}
	many["app"] = "web"
	u.SetLabels(many)
	c := compact(u, new(dictionary))
	if c.err != nil {
		t.Fatal(c.err)
	}
	if held := len(c.labels) + len(c.deflated); held > 32<<10 {
		t.Errorf("object with 5,000 labels holds %d bytes", held)
	}
	if !labels.SelectorFromSet(labels.Set{"app": "web"}).Matches(c.Labels()) || c.Labels().Has("nope") {
		t.Error("selectors do not read the deflated labels")
	}
	small := compact(decodeJSON(t, podJSON), new(dictionary))
	if small.bigLabels || small.Labels().Get("team") != "platform" {
		t.Error("ordinary labels not kept flat")
	}
}

// A label holding a NUL, which the flat form would read as a separator,
// is matched as the labels themselves say: "x\x00app\x00web" is not
// app=web. An API server refuses such labels; the cache does not rely on
// it.
func TestCompactNULLabels(t *testing.T) {
	u := decodeJSON(t, podJSON)
	u.SetLabels(map[string]string{"aaa": "x\x00app\x00web", "tier": "be"})
	c := compact(u, new(dictionary))
	for q, want := range map[string]bool{"app=web": false, "app": false, "!app": true, "tier=be": true, "aaa": true} {
		sel, err := labels.Parse(q)
		if err != nil {
			t.Fatal(err)
		}
		if got := sel.Matches(c.Labels()); got != want {
			t.Errorf("%s matches %v, want %v", q, got, want)
		}
	}
}
