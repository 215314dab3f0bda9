package audit_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/vilaca/portal/internal/core"
)

// gatedCounter is a RuleCounter that records the rule of every evaluation
// in order and, once armed, holds the worker that evaluated rule hold
// until the test lets it go (release) or lets all go (open): the audit
// workers call it synchronously, so it stands for a slow evaluation.
type gatedCounter struct {
	hold    string
	release chan struct{}
	open    chan struct{}
	once    sync.Once

	mu      sync.Mutex
	armed   bool
	seq     []string
	blocked int
}

func newGatedCounter(hold string) *gatedCounter {
	return &gatedCounter{hold: hold, release: make(chan struct{}), open: make(chan struct{})}
}

func (c *gatedCounter) Evaluated(r *core.Rule) {
	c.mu.Lock()
	c.seq = append(c.seq, r.Name)
	held := c.armed && r.Name == c.hold
	if held {
		c.blocked++
	}
	c.mu.Unlock()
	if !held {
		return
	}
	select {
	case <-c.release:
	case <-c.open:
	}
	c.mu.Lock()
	c.blocked--
	c.mu.Unlock()
}

func (*gatedCounter) SetViolations(*core.Rule, int) {}

func (c *gatedCounter) arm() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed, c.seq = true, nil
}

func (c *gatedCounter) openAll() { c.once.Do(func() { close(c.open) }) }

// state returns the rules evaluated since arm, in order, and how many
// workers the counter holds now.
func (c *gatedCounter) state() ([]string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seq...), c.blocked
}

func configMapRuleIn(name, ns string) string {
	return fmt.Sprintf(`
name: %s
severity: low
mode: [audit]
match:
  gvk: [{group: "", kind: ConfigMap}]
  namespaces: {include: [%s]}
rule: metadata.name != ""
message: "configmap {{ metadata.name }} is flagged"
---`, name, ns)
}

const fairBacklog = 200

// TestBusyNamespaceDoesNotDelayAnother: with the audit's one worker busy
// and namespace A's 200 new ConfigMaps queued behind it, a single
// ConfigMap created in namespace B afterwards is evaluated after at most one
// more of A's (A's turn in the round), and its finding reaches B's report
// while A's backlog is still queued. With one FIFO for every
// namespace, B's change waited for all of A's.
func TestBusyNamespaceDoesNotDelayAnother(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	nsA, nsB := namespace(t, c, "fair-busy"), namespace(t, c, "fair-quiet")
	counter := newGatedCounter("fair-busy")
	inst := startInstance(t, instanceOptions{
		rules: configMapRuleIn("fair-busy", nsA) + configMapRuleIn("fair-quiet", nsB), workers: 1, counter: counter,
	})
	// Registered after the instance: runs before it stops.
	t.Cleanup(counter.openAll)
	select {
	case <-inst.layer.Source.Synced():
	case <-time.After(time.Minute):
		t.Fatal("the initial evaluation did not finish")
	}
	counter.arm()
	depth := func() int { return int(inst.metric(t, "portal_audit_queue_depth", nil)) }

	forPods(t, fairBacklog, func(name string) error { return c.Create(ctx, configMap(nsA, name)) })
	eventually(t, 30*time.Second, "A's first ConfigMap held, the rest queued", func() (bool, error) {
		_, blocked := counter.state()
		return blocked == 1 && depth() == fairBacklog-1, nil
	})
	create(t, c, configMap(nsB, "change"))
	// Both gauges: the depth counts a key as it is recorded, the namespaces
	// once the work queue has it, a moment later (a CI run read the second
	// between the two).
	eventually(t, 30*time.Second, "B's change queued in a namespace of its own", func() (bool, error) {
		return depth() == fairBacklog && inst.metric(t, "portal_audit_queue_namespaces", nil) == 2, nil
	})

	released := releaseUntilEvaluated(t, counter, "fair-quiet", 20)
	// The one the worker held, and at most one more: A's turn in the
	// round may come before B's.
	if released > 2 {
		t.Errorf("B's change was evaluated after %d of A's objects, want at most 2", released)
	}
	waitReport(t, c, nsB, "B's finding reported", func(st reportState) bool { return st.has("fair-quiet/change/") })
	if d := depth(); d < fairBacklog-released-2 {
		t.Errorf("A's backlog is %d when B's finding is reported, want at least %d still queued", d, fairBacklog-released-2)
	}
}

// releaseUntilEvaluated lets the counter's held evaluations go one at a
// time, each time waiting until the worker took its next object, until
// rule has been evaluated; at most max. It returns how many it let go.
func releaseUntilEvaluated(t *testing.T, c *gatedCounter, rule string, max int) int {
	t.Helper()
	for released := 0; ; released++ {
		seq, _ := c.state()
		for _, r := range seq {
			if r == rule {
				return released
			}
		}
		if released == max {
			t.Fatalf("%s not evaluated after %d of %s's %d queued objects", rule, max, c.hold, fairBacklog)
		}
		c.release <- struct{}{}
		eventually(t, 30*time.Second, "the worker's next object", func() (bool, error) {
			now, _ := c.state()
			return len(now) > len(seq), nil
		})
	}
}
