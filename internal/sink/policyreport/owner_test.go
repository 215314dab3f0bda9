package policyreport

import (
	"encoding/json"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestReportsCarryTheirOwner: a writer with an owner (its Node) puts it in
// the ownerReferences of every report it writes, namespaced and cluster, in
// both formats, so the garbage collector deletes them with the Node; a
// writer without one leaves ownerReferences out.
func TestReportsCarryTheirOwner(t *testing.T) {
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "cp-1", UID: types.UID("0b1c")}
	lim := limits{results: 10, bytes: 1 << 20}
	for _, f := range []string{FormatWGPolicy, FormatOpenReports} {
		for _, ns := range []string{"ns", ""} {
			sc := newScope(ns)
			of := objectFindings("p", 1, "m")
			of.Object.Namespace = ns
			set(sc, of, lim)
			for _, owners := range [][]metav1.OwnerReference{{owner}, nil} {
				data, _, _, err := buildReport(formats[f], "portal-runtime-cp-1", owners, sc, 0, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				var doc struct {
					Kind     string            `json:"kind"`
					Metadata metav1.ObjectMeta `json:"metadata"`
				}
				if err := json.Unmarshal(data, &doc); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(doc.Metadata.OwnerReferences, owners) {
					t.Errorf("%s %q: ownerReferences %+v, want %+v", doc.Kind, ns, doc.Metadata.OwnerReferences, owners)
				}
			}
		}
	}
}

// TestOwnerNeedsItsIdentity: an owner reference the API server would refuse
// on every write is refused when the sink is built.
func TestOwnerNeedsItsIdentity(t *testing.T) {
	r := newRecorder()
	c := r.client()
	for _, o := range []metav1.OwnerReference{
		{APIVersion: "v1", Kind: "Node", Name: "cp-1"},
		{APIVersion: "v1", Kind: "Node", UID: "0b1c"},
	} {
		if _, err := New(Options{Client: c, Reader: c, Owner: &o}); err == nil {
			t.Errorf("owner %+v accepted", o)
		}
	}
	if _, err := New(Options{Client: c, Reader: c, Owner: &metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: "cp-1", UID: "0b1c"}}); err != nil {
		t.Errorf("complete owner refused: %v", err)
	}
}
