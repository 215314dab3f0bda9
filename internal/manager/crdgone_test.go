package manager

import (
	"context"
	"fmt"
	"log/slog"
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
	hc, err := rest.HTTPClientFor(cl.Config)
	if err != nil {
		t.Fatal(err)
	}
	m, err := newForgettingMapper(cl.Config, hc)
	if err != nil {
		t.Fatal(err)
	}
	// Served before they are deleted, as an uninstall's are: a CRD not
	// yet in discovery reads as gone at once, and the wait would not be
	// tested.
	devtest.Eventually(t, "the four CRDs served", func() bool {
		probe, err := m.fresh()
		if err != nil {
			return false
		}
		for _, crd := range crds {
			if _, err := probe.ResourcesFor(schema.GroupVersionResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}); err != nil {
				return false
			}
		}
		return true
	})
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
	// discovery, and on a loaded two-core CI machine that once took more
	// than 30 s and once more than two minutes. What the API server still
	// has is in the failure, to tell its slowness from the worker's.
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 4*time.Minute, true, func(context.Context) (bool, error) {
		return told1(1)(), nil
	}); err != nil {
		t.Fatalf("waiting for the rules told the three CRDs went: %v; the API server still has: %s", err, stillThere(c, m, crds[:3]))
	}
	if n := told.Load(); n != 1 {
		t.Fatalf("told %d times for three CRDs deleted together, want once", n)
	}
	if probe, err := m.fresh(); err == nil {
		for _, crd := range crds[:3] {
			if _, err := probe.ResourcesFor(schema.GroupVersionResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}); !meta.IsNoMatchError(err) {
				t.Errorf("told while %s is still served (%v)", crd.Name, err)
			}
		}
	}

	// Deleted and created again before discovery dropped it: not waited
	// for (nothing changed for the rules; the worker would otherwise ask
	// discovery for a minute).
	d.deleted(crds[3])
	d.added(crds[3])
	d.mu.Lock()
	waiting := len(d.pending)
	d.mu.Unlock()
	if waiting != 0 {
		t.Fatalf("%d CRDs waited for after the one deleted was created again", waiting)
	}

	// Still served a minute after its delete event: given up on.
	d.deleted(crds[3])
	if got := told.Load(); got != 1 {
		t.Fatalf("told before the wait for a CRD still served ended (%d)", got)
	}
	clk.SetTime(clk.Now().Add(deletedCRDWait + time.Second))
	devtest.Eventually(t, "the rules told once the wait for a CRD still served ended", told1(2))
}

// stillThere says, for each of crds, whether the API server still stores
// it (and in what state) and whether a fresh mapper still finds it served.
func stillThere(c client.Client, m *forgettingMapper, crds []*apiextensionsv1.CustomResourceDefinition) string {
	probe, perr := m.fresh()
	var out []string
	for _, crd := range crds {
		state := "deleted"
		var got apiextensionsv1.CustomResourceDefinition
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(crd), &got); err == nil {
			state = fmt.Sprintf("stored (deletionTimestamp %v, finalizers %v, conditions %+v)", got.DeletionTimestamp, got.Finalizers, got.Status.Conditions)
		} else if !apierrors.IsNotFound(err) {
			state = "unknown: " + err.Error()
		}
		served := "mapper: " + fmt.Sprint(perr)
		if perr == nil {
			_, rerr := probe.ResourcesFor(schema.GroupVersionResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural})
			served = fmt.Sprintf("discovery answers %v", rerr)
		}
		out = append(out, crd.Name+": "+state+"; "+served)
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
