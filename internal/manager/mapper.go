package manager

import (
	"net/http"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// forgettingMapper is the manager's RESTMapper, started afresh when a
// CustomResourceDefinition is deleted. controller-runtime's dynamic mapper
// learns the kinds it is asked about and never forgets one, so after a CRD
// went a rule matching its kind stayed Ready and every later question about
// the kind was answered from what the API server no longer serves. A fresh
// mapper reads discovery again, lazily, group by group, as it is asked.
type forgettingMapper struct {
	cfg *rest.Config
	hc  *http.Client
	cur atomic.Pointer[mapperBox]
}

// mapperBox holds a mapper for atomic.Pointer, which takes no interface.
type mapperBox struct{ meta.RESTMapper }

func newForgettingMapper(cfg *rest.Config, hc *http.Client) (*forgettingMapper, error) {
	m := &forgettingMapper{cfg: cfg, hc: hc}
	return m, m.Forget()
}

// Forget replaces what the mapper learnt with a fresh mapper; a question
// being answered meanwhile finishes on the old one.
func (m *forgettingMapper) Forget() error {
	fresh, err := m.fresh()
	if err != nil {
		return err
	}
	m.cur.Store(&mapperBox{fresh})
	return nil
}

// fresh is a mapper that knows nothing yet, to ask without replacing m's.
func (m *forgettingMapper) fresh() (meta.RESTMapper, error) {
	return apiutil.NewDynamicRESTMapper(m.cfg, m.hc)
}

func (m *forgettingMapper) get() meta.RESTMapper { return m.cur.Load().RESTMapper }

func (m *forgettingMapper) KindFor(r schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	return m.get().KindFor(r)
}

func (m *forgettingMapper) KindsFor(r schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	return m.get().KindsFor(r)
}

func (m *forgettingMapper) ResourceFor(r schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	return m.get().ResourceFor(r)
}

func (m *forgettingMapper) ResourcesFor(r schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	return m.get().ResourcesFor(r)
}

func (m *forgettingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	return m.get().RESTMapping(gk, versions...)
}

func (m *forgettingMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	return m.get().RESTMappings(gk, versions...)
}

func (m *forgettingMapper) ResourceSingularizer(resource string) (string, error) {
	return m.get().ResourceSingularizer(resource)
}
