package manager

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"slices"
)

// Board is where the enabled layers meet. Layers never see each other: in
// the first phase each puts on the board what the others consume (Offer a
// value, Provide a constructor), and in the second each sets up with what it
// asks the board for by type (All, One). Every layer has provided before
// any sets up and every constructor runs once, when first asked for, so the
// order of the layers decides nothing. Only Run's goroutine uses a board,
// while it assembles the manager, so it holds no lock.
type Board struct {
	entries map[reflect.Type][]*entry
	// deps is what constructors are given; nil until bind, while the
	// manager does not exist yet.
	deps *Deps
}

// entry is one thing a layer put on the board, filed under every type it
// was offered as.
type entry struct {
	// by names the provider in errors: "audit layer", "findings pipeline".
	by    string
	build func(Deps) (any, error)
	value any
	state buildState
	err   error
}

type buildState int

const (
	unbuilt buildState = iota
	building
	built
)

// Key names a type a provided value is also filed under, for consumers
// that ask for an interface it implements.
type Key struct{ t reflect.Type }

// KeyOf is the key of type I.
func KeyOf[I any]() Key { return Key{reflect.TypeFor[I]()} }

func newBoard() *Board { return &Board{entries: map[reflect.Type][]*entry{}} }

// Offer puts v on b for the layers that ask for T. A value needs nothing of
// the manager, so it can be asked for before the manager exists: that is
// how a layer changes the manager's options.
func Offer[T any](b *Board, by string, v T) {
	b.file(reflect.TypeFor[T](), &entry{by: by, value: v, state: built})
}

// Provide puts on b a constructor of what it files under T and each of as.
// It runs once, after the manager exists, when something first asks for
// one of those types (or when Run builds what nobody asked for).
func Provide[T any](b *Board, by string, build func(Deps) (T, error), as ...Key) error {
	t := reflect.TypeFor[T]()
	for _, k := range as {
		if k.t.Kind() != reflect.Interface || !t.Implements(k.t) {
			return fmt.Errorf("%s provides %s, which is not a %s", by, t, k.t)
		}
	}
	e := &entry{by: by, build: func(d Deps) (any, error) { return build(d) }}
	b.file(t, e)
	for _, k := range as {
		b.file(k.t, e)
	}
	return nil
}

func (b *Board) file(t reflect.Type, e *entry) {
	b.entries[t] = append(b.entries[t], e)
	// By provider, not by the order they provided in: a consumer sees the
	// same list whatever the order of the layers.
	slices.SortStableFunc(b.entries[t], func(x, y *entry) int { return cmp.Compare(x.by, y.by) })
}

// All returns everything on b filed under T, by provider name, building what
// is not built yet.
func All[T any](b *Board) ([]T, error) {
	es := b.entries[reflect.TypeFor[T]()]
	out := make([]T, 0, len(es))
	for _, e := range es {
		v, err := b.resolve(e)
		if err != nil {
			return nil, err
		}
		t, _ := v.(T) // a nil interface built is T's zero value
		out = append(out, t)
	}
	return out, nil
}

// One returns the one thing on b filed under T, or T's zero value when
// there is none; two are an error, since the consumer could not tell which
// to use.
func One[T any](b *Board) (T, error) {
	var zero T
	es := b.entries[reflect.TypeFor[T]()]
	switch len(es) {
	case 0:
		return zero, nil
	case 1:
		v, err := b.resolve(es[0])
		if err != nil {
			return zero, err
		}
		t, _ := v.(T)
		return t, nil
	}
	return zero, fmt.Errorf("%s is provided by %s and %s: a consumer takes one", reflect.TypeFor[T](), es[0].by, es[1].by)
}

// has reports whether anything is filed under T, without building it.
func has[T any](b *Board) bool { return len(b.entries[reflect.TypeFor[T]()]) > 0 }

// bind gives the constructors the shared dependencies, b among them, once
// the manager exists.
func (b *Board) bind(d Deps) {
	d.Board = b
	b.deps = &d
}

// buildAll runs every constructor nothing has asked for yet, so a layer's
// failure to build shows at start-up whatever the others consume.
func (b *Board) buildAll() error {
	var errs []error
	for _, t := range b.types() {
		for _, e := range b.entries[t] {
			if _, err := b.resolve(e); err != nil && !slices.Contains(errs, err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// types are the types on b in a fixed order, so start-up builds in the same
// order every time.
func (b *Board) types() []reflect.Type {
	ts := make([]reflect.Type, 0, len(b.entries))
	for t := range b.entries {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(x, y reflect.Type) int { return cmp.Compare(x.String(), y.String()) })
	return ts
}

func (b *Board) resolve(e *entry) (any, error) {
	switch e.state {
	case built:
		return e.value, e.err
	case building:
		return nil, fmt.Errorf("%s: what it provides asks, through others, for itself", e.by)
	}
	if b.deps == nil {
		return nil, fmt.Errorf("%s: what it provides needs the manager, which does not exist yet", e.by)
	}
	e.state = building
	v, err := e.build(*b.deps)
	if err != nil {
		err = fmt.Errorf("%s: %w", e.by, err)
	}
	e.value, e.err, e.state = v, err, built
	return v, err
}
