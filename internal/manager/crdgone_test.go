package manager

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/devcluster/devtest"
)

// TestDeletedCRDsAreFollowedTogether: the CRDs an uninstall deletes are
// waited for together, and the rules and layers told once, when discovery
// has dropped the last; a CRD created again under a name waited for is
// not waited for any more; one still served past the wait (on the
// injected clock) is given up on, and the rules told.
func TestDeletedCRDsAreFollowedTogether(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cl := shared.Cluster(t)
	scheme := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cl.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, kind := range []string{"Alpha", "Beta", "Gamma", "Delta"} {
		crd := goneCRD(kind)
		if err := c.Create(ctx, crd); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), crd) })
		crds = append(crds, crd)
	}
	// The worker's discovery requests are counted, to know it has probed
	// (discovery cannot be watched), and bounded, so a failure's report
	// cannot hang on a wedged API server.
	probeCfg := rest.CopyConfig(cl.Config)
	probeCfg.Timeout = 30 * time.Second
	hc, err := rest.HTTPClientFor(probeCfg)
	if err != nil {
		t.Fatal(err)
	}
	var discoveryGets atomic.Int64
	hc.Transport = countingTransport{hc.Transport, &discoveryGets}
	m, err := newForgettingMapper(probeCfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	// Served before they are deleted, as an uninstall's are: a CRD not
	// yet in discovery reads as gone at once, and the wait would not be
	// tested. The API server's naming and establishing controllers come
	// first; as slow as its finalising under load (below).
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 4*time.Minute, true, func(context.Context) (bool, error) {
		return servedAll(m, crds), nil
	}); err != nil {
		t.Fatalf("waiting for the four CRDs served: %v; the API server has: %s", err, stillThere(c, m, nil, crds))
	}
	// Listed before they are deleted, as an uninstall's are (Portal's
	// informers list them): the API server makes a CRD's storage on its
	// first use, and the finaliser of a CRD deleted before then lists a
	// watch cache still initialising, is refused ("storage is
	// (re)initializing") and retries with a doubling back-off. Under CI
	// load that left two of the three terminating for four minutes. A
	// list succeeds once the watch cache is ready (client-go waits out the
	// refusals), so the finaliser's own list succeeds at its first try.
	for _, crd := range crds {
		if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
			return listInstances(ctx, c, crd) == nil, nil
		}); err != nil {
			t.Fatalf("waiting for %s's instances listed: %v; last answer: %v", crd.Name, err, listInstances(ctx, c, crd))
		}
	}
	clk := clocktesting.NewFakePassiveClock(time.Now())
	var told atomic.Int32
	d := newDeletedCRDs(m, clk, slog.New(slog.DiscardHandler), func() { told.Add(1) })
	go d.run(ctx)
	told1 := func(want int32) func() bool { return func() bool { return told.Load() >= want } }

	// Three deleted together, as an uninstall does: each still served
	// for a while, the last dropped after the first.
	for _, crd := range crds[:3] {
		d.deleted(crd)
	}
	for _, crd := range crds[:3] {
		if err := c.Delete(ctx, crd); err != nil {
			t.Fatal(err)
		}
	}
	// Longer than devtest.Eventually's 30 s: the API server's own
	// controllers finalise the three deletions and drop them from
	// discovery; on a loaded two-core CI machine this test once timed out
	// at 30 s and once at two minutes. What the API server and the worker
	// still have is in the failure, to tell the one's slowness from the
	// other's.
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 4*time.Minute, true, func(context.Context) (bool, error) {
		return told1(1)(), nil
	}); err != nil {
		t.Fatalf("waiting for the rules told the three CRDs went: %v; the API server has: %s", err, stillThere(c, m, d, crds[:3]))
	}
	if n := told.Load(); n != 1 {
		t.Fatalf("told %d times for three CRDs deleted together, want once", n)
	}
	// A deleted CRD does not come back into discovery: served now means
	// served when the worker told.
	for _, crd := range crds[:3] {
		if served, err := isServed(m, crd); err != nil {
			t.Errorf("cannot ask discovery about %s: %v", crd.Name, err)
		} else if served {
			t.Errorf("told while %s is still served", crd.Name)
		}
	}

	// Deleted and created again before discovery dropped it: not waited
	// for (nothing changed for the rules; the worker would otherwise ask
	// discovery for a minute). Bookkeeping only: a worker that is not
	// running, so none can start a round between the two events.
	idle := newDeletedCRDs(m, clk, slog.New(slog.DiscardHandler), func() { t.Error("an idle worker told the rules") })
	idle.deleted(crds[3])
	idle.added(crds[3])
	if len(idle.pending) != 0 {
		t.Fatalf("%d CRDs waited for after the one deleted was created again", len(idle.pending))
	}

	// Still served a minute after its delete event: given up on, and
	// not before. Probes while the clock stands still (a probe asks
	// discovery at /api and /apis: six requests, three probes) must leave
	// the rules untold.
	before := discoveryGets.Load()
	d.deleted(crds[3])
	devtest.Eventually(t, "the worker probing the CRD still served", func() bool { return discoveryGets.Load() >= before+6 })
	if got := told.Load(); got != 1 {
		t.Fatalf("told before the wait for a CRD still served ended (%d)", got)
	}
	clk.SetTime(clk.Now().Add(deletedCRDWait + time.Second))
	devtest.Eventually(t, "the rules told once the wait for a CRD still served ended", told1(2))
}

// listInstances lists crd's custom resources, as an informer would.
func listInstances(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition) error {
	var list metav1.PartialObjectMetadataList
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: crd.Spec.Group, Version: crd.Spec.Versions[0].Name, Kind: crd.Spec.Names.ListKind})
	return c.List(ctx, &list)
}

// countingTransport counts the requests that go through it.
type countingTransport struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.next.RoundTrip(r)
}

// isServed asks a fresh mapper whether discovery serves crd's resource.
func isServed(m *forgettingMapper, crd *apiextensionsv1.CustomResourceDefinition) (bool, error) {
	probe, err := m.fresh()
	if err != nil {
		return false, err
	}
	_, err = probe.ResourcesFor(schema.GroupVersionResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural})
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	return err == nil, err
}

func servedAll(m *forgettingMapper, crds []*apiextensionsv1.CustomResourceDefinition) bool {
	for _, crd := range crds {
		if served, _ := isServed(m, crd); !served {
			return false
		}
	}
	return true
}

// stillThere says, for each of crds, whether the API server still stores
// it (and in what state) and whether discovery serves it, and what d (when
// not nil) still waits for.
func stillThere(c client.Client, m *forgettingMapper, d *deletedCRDs, crds []*apiextensionsv1.CustomResourceDefinition) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []string
	for _, crd := range crds {
		state := "deleted"
		var got apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), &got); err == nil {
			state = fmt.Sprintf("stored (deletionTimestamp %v, finalizers %v, conditions %+v)", got.DeletionTimestamp, got.Finalizers, got.Status.Conditions)
		} else if !apierrors.IsNotFound(err) {
			state = "unknown: " + err.Error()
		}
		served, err := isServed(m, crd)
		out = append(out, fmt.Sprintf("%s: %s; served %v (%v)", crd.Name, state, served, err))
	}
	if d != nil {
		d.mu.Lock()
		out = append(out, fmt.Sprintf("the worker waits for %v", d.pending))
		d.mu.Unlock()
	}
	return strings.Join(out, "\n")
}

func goneCRD(kind string) *apiextensionsv1.CustomResourceDefinition {
	plural := strings.ToLower(kind) + "s"
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + ".gone.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "gone.example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.ToLower(kind), Kind: kind, ListKind: kind + "List"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: new(true)}}}},
		},
	}
}
