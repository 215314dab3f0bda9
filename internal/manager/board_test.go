package manager

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/clock"

	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/findings"
)

// greeter is what the test's producer offers as an interface.
type greeter interface{ greet() string }

type hello struct{ n int }

func (h *hello) greet() string { return fmt.Sprint("hello ", h.n) }

// testLayer provides with provide and sets up with setup.
type testLayer struct {
	name    string
	provide func(*Board) error
	setup   func(Deps) error
}

func (l *testLayer) Name() string { return l.name }
func (l *testLayer) Provide(b *Board) error {
	if l.provide == nil {
		return nil
	}
	return l.provide(b)
}
func (l *testLayer) Setup(d Deps) error {
	if l.setup == nil {
		return nil
	}
	return l.setup(d)
}

// TestBoardWiresWhateverTheOrder: a layer providing a component and two
// layers consuming it, one by its interface and one by its type, and a
// constructor that consumes another constructor's value, are wired the
// same in every order of the layers, and each constructor runs once.
func TestBoardWiresWhateverTheOrder(t *testing.T) {
	for _, order := range permutations([]int{0, 1, 2, 3}) {
		builds := 0
		var byInterface greeter
		var byType *hello
		var derived string
		ls := []Layer{
			&testLayer{name: "producer", provide: func(b *Board) error {
				return Provide(b, "producer layer", func(Deps) (*hello, error) {
					builds++
					return &hello{n: builds}, nil
				}, KeyOf[greeter]())
			}},
			&testLayer{name: "by-interface", setup: func(d Deps) (err error) {
				byInterface, err = One[greeter](d.Board)
				return err
			}},
			&testLayer{name: "by-type", setup: func(d Deps) (err error) {
				byType, err = One[*hello](d.Board)
				return err
			}},
			// Provides a string built from the greeter: a constructor
			// asking for another's value, in whatever order they came.
			&testLayer{name: "deriver", provide: func(b *Board) error {
				return Provide(b, "deriver layer", func(d Deps) (string, error) {
					g, err := One[greeter](d.Board)
					if err != nil || g == nil {
						return "", fmt.Errorf("no greeter: %v", err)
					}
					return g.greet() + ", derived", nil
				})
			}, setup: func(d Deps) (err error) {
				derived, err = One[string](d.Board)
				return err
			}},
		}
		shuffled := make([]Layer, len(ls))
		for i, j := range order {
			shuffled[i] = ls[j]
		}
		if err := wire(shuffled, Deps{}); err != nil {
			t.Fatalf("order %v: %v", layerNames(shuffled), err)
		}
		if builds != 1 {
			t.Errorf("order %v: the producer's constructor ran %d times, want once", layerNames(shuffled), builds)
		}
		if byType == nil || byInterface != greeter(byType) {
			t.Errorf("order %v: the consumers got %v and %v, want one value", layerNames(shuffled), byInterface, byType)
		}
		if derived != "hello 1, derived" {
			t.Errorf("order %v: derived %q", layerNames(shuffled), derived)
		}
	}
}

// wire runs the two phases as Run does, without a manager.
func wire(ls []Layer, d Deps) error {
	b := newBoard()
	if err := provideLayers(ls, b); err != nil {
		return err
	}
	b.bind(d)
	d.Board = b
	if err := b.buildAll(); err != nil {
		return err
	}
	return setupLayers(ls, d)
}

// TestBoardRefusesWhatCannotBeWired: two providers of what a consumer takes
// one of, a constructor asking for itself, a value asked for under a type
// it does not implement, and a constructor asked for before the manager
// exists are errors naming the provider, not a silent pick or a hang.
func TestBoardRefusesWhatCannotBeWired(t *testing.T) {
	b := newBoard()
	Offer[greeter](b, "a layer", &hello{})
	Offer[greeter](b, "b layer", &hello{})
	if _, err := One[greeter](b); err == nil || !strings.Contains(err.Error(), "a layer and b layer") {
		t.Errorf("two greeters for One: %v", err)
	}
	if all, err := All[greeter](b); err != nil || len(all) != 2 {
		t.Errorf("All of two greeters: %v, %v", all, err)
	}

	b = newBoard()
	if err := Provide(b, "loop layer", func(d Deps) (*hello, error) {
		_, err := One[*hello](d.Board)
		return &hello{}, err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := One[*hello](b); err == nil || !strings.Contains(err.Error(), "does not exist yet") {
		t.Errorf("a constructor before the manager: %v", err)
	}
	b.bind(Deps{})
	if err := b.buildAll(); err == nil || !strings.Contains(err.Error(), "loop layer") || !strings.Contains(err.Error(), "itself") {
		t.Errorf("a constructor asking for itself: %v", err)
	}

	if err := Provide(newBoard(), "odd layer", func(Deps) (string, error) { return "", nil }, KeyOf[greeter]()); err == nil {
		t.Error("a string provided as a greeter was accepted")
	}
}

// TestLayersWireWhateverTheOrder sets up Portal's own layers in several
// orders against a real API server: every order gives the same board, the
// actions engine is admission's verdict sink and a sink of the findings
// pipeline, and the pipeline exists for the producers of findings.
func TestLayersWireWhateverTheOrder(t *testing.T) {
	cl := shared.Cluster(t)
	var first string
	for i, order := range [][]int{{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 4, 0, 3, 1}} {
		cfg, _, _ := layerConfig(t, fmt.Sprint("layers-order-", i))
		cfg.Clock = clock.RealClock{}
		cfg.Admission.Enabled = true
		cfg.Audit.Enabled = true
		if err := cfg.Sinks.Parse("--report-format=none"); err != nil {
			t.Fatal(err)
		}
		cfg.Network.Enabled = true
		cfg.Runtime.Enabled = true
		cfg.Actions.Enabled = true
		ls, err := enabledLayers(&cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) != len(order) {
			t.Fatalf("%d layers enabled: %v", len(ls), layerNames(ls))
		}
		shuffled := make([]Layer, len(ls))
		for i, j := range order {
			shuffled[i] = ls[j]
		}
		_, b, err := assemble(cl.Config, &cfg, shuffled, nil)
		if err != nil {
			t.Fatalf("order %v: %v", layerNames(shuffled), err)
		}
		got := wiring(b)
		if first == "" {
			first = got
		} else if got != first {
			t.Errorf("order %v wires\n%s\nwant, as in registry order,\n%s", layerNames(shuffled), got, first)
		}
		eng, _ := One[*actions.Engine](b)
		verdicts, _ := One[core.VerdictSink](b)
		sinks, _ := All[core.OutputSink](b)
		pipeline, _ := One[*findings.Pipeline](b)
		if eng == nil || verdicts != core.VerdictSink(eng) || !slices.Contains(sinks, core.OutputSink(eng)) {
			t.Errorf("order %v: engine %p, verdict sink %v, findings sinks %v: want the one engine in both", layerNames(shuffled), eng, verdicts, sinks)
		}
		if pipeline == nil {
			t.Errorf("order %v: no findings pipeline for audit, network and runtime", layerNames(shuffled))
		}
	}
}

// wiring describes b: each type and who provided it.
func wiring(b *Board) string {
	var lines []string
	for _, t := range b.types() {
		var by []string
		for _, e := range b.entries[t] {
			by = append(by, e.by)
		}
		lines = append(lines, fmt.Sprintf("%s <- %s", t, strings.Join(by, ", ")))
	}
	return strings.Join(lines, "\n")
}

// permutations of xs, each a new slice.
func permutations(xs []int) [][]int {
	if len(xs) <= 1 {
		return [][]int{slices.Clone(xs)}
	}
	var out [][]int
	for i := range xs {
		rest := append(slices.Clone(xs[:i]), xs[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]int{xs[i]}, p...))
		}
	}
	return out
}

// TestActionsWithNothingToFeedThem: the actions layer on its own asks the
// board for the findings pipeline and finds none, and Portal refuses to
// start, saying which layers feed it.
func TestActionsWithNothingToFeedThem(t *testing.T) {
	cl := shared.Cluster(t)
	cfg, _, _ := layerConfig(t, "layers-actions-alone")
	cfg.Clock = clock.RealClock{}
	cfg.Actions.Enabled = true
	ls, err := enabledLayers(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = assemble(cl.Config, &cfg, ls, nil)
	if err == nil || !strings.Contains(err.Error(), "nothing feeds the actions") {
		t.Fatalf("actions alone: %v, want refused", err)
	}
}
