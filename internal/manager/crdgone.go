package manager

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// deletedCRDs follows the CustomResourceDefinitions deleted and still in
// the API server's discovery (its discovery controller catches up after the
// delete event), every deletion at once: one worker asks a mapper that
// knows nothing yet, every 100 ms, whether each is still served, and once
// none is (or a minute has passed for the rest) has the manager's mapper
// forget what it knew and calls done, once for all. Discovery cannot be
// watched; one probe a tick whatever the number of CRDs an uninstall
// deletes.
type deletedCRDs struct {
	mapper *forgettingMapper
	clock  clock.PassiveClock
	log    *slog.Logger
	done   func()

	mu sync.Mutex
	// pending holds the names of the CRDs waited for, and when each was
	// deleted.
	pending map[string]time.Time
	kick    chan struct{}
}

// deletedCRDWait is how long a deleted CRD is waited for in discovery.
const deletedCRDWait = time.Minute

func newDeletedCRDs(m *forgettingMapper, c clock.PassiveClock, log *slog.Logger, done func()) *deletedCRDs {
	return &deletedCRDs{mapper: m, clock: c, log: log, done: done, pending: map[string]time.Time{}, kick: make(chan struct{}, 1)}
}

// deleted is the informer's DeleteFunc.
func (d *deletedCRDs) deleted(o any) {
	name, ok := crdName(o)
	if !ok {
		return
	}
	d.mu.Lock()
	d.pending[name] = d.clock.Now()
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// added is the informer's AddFunc: a CRD created again under its name is
// no longer waited for.
func (d *deletedCRDs) added(o any) {
	if name, ok := crdName(o); ok {
		d.mu.Lock()
		delete(d.pending, name)
		d.mu.Unlock()
	}
}

func crdName(o any) (string, bool) {
	if tomb, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = tomb.Obj
	}
	crd, ok := o.(metav1.Object)
	if !ok {
		return "", false
	}
	return crd.GetName(), true
}

// run follows the deletions until ctx ends.
func (d *deletedCRDs) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		}
		d.mu.Lock()
		none := len(d.pending) == 0
		d.mu.Unlock()
		if none {
			// A kick left by a deletion the last round already covered.
			continue
		}
		if wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, d.settled) != nil {
			return // ctx ended
		}
		if err := d.mapper.Forget(); err != nil {
			d.log.Warn("cannot start the RESTMapper afresh after a CustomResourceDefinition was deleted; rules matching its kind may still say Ready", "error", err)
			continue
		}
		d.done()
	}
}

// settled drops the pending CRDs discovery no longer serves, and those
// waited for too long, and reports whether none is left.
func (d *deletedCRDs) settled(context.Context) (bool, error) {
	d.mu.Lock()
	names := make(map[string]time.Time, len(d.pending))
	for n, t := range d.pending {
		names[n] = t
	}
	d.mu.Unlock()
	probe, err := d.mapper.fresh()
	var gone []string
	for name, since := range names {
		// A CRD's name is PLURAL.GROUP; the API server refuses any other.
		plural, group, _ := strings.Cut(name, ".")
		if err == nil {
			_, rerr := probe.ResourcesFor(schema.GroupVersionResource{Group: group, Resource: plural})
			if meta.IsNoMatchError(rerr) {
				gone = append(gone, name)
				continue
			}
		}
		if d.clock.Since(since) > deletedCRDWait {
			d.log.Warn("a deleted CustomResourceDefinition is still in discovery after a minute; rules matching its kind are checked again now", "crd", name)
			gone = append(gone, name)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, name := range gone {
		// Unless deleted again meanwhile.
		if d.pending[name].Equal(names[name]) {
			delete(d.pending, name)
		}
	}
	return len(d.pending) == 0, nil
}
