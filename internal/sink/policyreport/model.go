package policyreport

import (
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/core"
)

// scope is the results of one namespace ("" for cluster-scoped objects)
// split into shards: report portal (shard 0), portal-1, portal-2, ...
//
// An object's results always sit together in one shard, and an object stays
// in its shard while it fits, so a change to one object rewrites one report.
// New objects go to the lowest shard with room.
type scope struct {
	namespace string
	objects   map[core.ObjectKey]*object
	shards    []*shard
}

type object struct {
	results []result
	bytes   int
	shard   int
}

type shard struct {
	objects map[core.ObjectKey]struct{}
	results int
	bytes   int
	// dirty shards are written (or deleted, when empty) by a writer, the
	// one dirty longest first (dirtySince).
	dirty      bool
	dirtySince time.Time
	// inflight is set while a writer writes the shard: one write per
	// report at a time, each with the content current when it started.
	inflight bool
	// exists says the report is on the API server.
	exists bool
	// written is the digest of the content last applied, to skip
	// identical writes.
	written string
	// pending holds, per object changed since the last write, when the
	// change was first observed: delivered to the latency metric once a
	// write carries it. Bounded by the objects of the scope.
	pending map[core.ObjectKey]time.Time
	// dropped is how many results the last rendering cut to stay under the
	// byte limit (portal_policyreport_results_dropped).
	dropped int
	// retry is the backoff of a shard whose writes fail (nil while they
	// succeed); retryAt holds the shard back until its delay passes.
	retry   *wait.Backoff
	retryAt time.Time
}

// markDirty queues the shard for a write; now orders it among the dirty.
func (sh *shard) markDirty(now time.Time) {
	if !sh.dirty {
		sh.dirty, sh.dirtySince = true, now
	}
}

// touch marks the shard dirty and remembers when key's change was observed.
func (sh *shard) touch(key core.ObjectKey, observed, now time.Time) {
	sh.markDirty(now)
	if observed.IsZero() {
		return
	}
	if sh.pending == nil {
		sh.pending = map[core.ObjectKey]time.Time{}
	}
	if t, ok := sh.pending[key]; !ok || observed.Before(t) {
		sh.pending[key] = observed
	}
}

func newScope(ns string) *scope {
	return &scope{namespace: ns, objects: map[core.ObjectKey]*object{}}
}

func (sc *scope) shardAt(i int) *shard {
	for len(sc.shards) <= i {
		sc.shards = append(sc.shards, nil)
	}
	if sc.shards[i] == nil {
		sc.shards[i] = &shard{objects: map[core.ObjectKey]struct{}{}}
	}
	return sc.shards[i]
}

// set replaces an object's results; nil results remove it. prefer is the
// shard to keep it in when it fits (-1: none). observed is when the change
// was seen (zero: unknown), now the time of the sink's clock.
func (sc *scope) set(key core.ObjectKey, results []result, bytes int, prefer int, lim limits, observed, now time.Time) {
	if old := sc.objects[key]; old != nil {
		if prefer < 0 {
			prefer = old.shard
		}
		sh := sc.shards[old.shard]
		delete(sh.objects, key)
		sh.results -= len(old.results)
		sh.bytes -= old.bytes
		delete(sc.objects, key)
		if len(results) == 0 {
			sh.touch(key, observed, now)
			return
		}
		// Only the shard the object ends up in carries its observation.
		sh.markDirty(now)
	}
	if len(results) == 0 {
		return
	}
	o := &object{results: results, bytes: bytes, shard: sc.place(len(results), bytes, prefer, lim)}
	sh := sc.shardAt(o.shard)
	sh.objects[key] = struct{}{}
	sh.results += len(results)
	sh.bytes += bytes
	sh.touch(key, observed, now)
	sc.objects[key] = o
}

// place picks the shard for an object of n results and the given size: the
// preferred one when it fits, else the lowest that fits, else a new one. An
// object larger than a whole report gets a shard of its own (rendering cuts
// its results only at the byte limit).
func (sc *scope) place(n, bytes, prefer int, lim limits) int {
	fits := func(i int) bool {
		if i < 0 || i >= len(sc.shards) || sc.shards[i] == nil {
			return i >= 0
		}
		sh := sc.shards[i]
		return len(sh.objects) == 0 || (sh.results+n <= lim.results && sh.bytes+bytes <= lim.bytes)
	}
	if prefer >= 0 && fits(prefer) {
		return prefer
	}
	for i := range sc.shards {
		if sc.shards[i] != nil && len(sc.shards[i].objects) > 0 && fits(i) {
			return i
		}
	}
	for i := range sc.shards {
		if sc.shards[i] == nil || len(sc.shards[i].objects) == 0 {
			return i
		}
	}
	return len(sc.shards)
}

// drop forgets an empty shard once its report is gone, and trailing empty
// slots.
func (sc *scope) drop(i int) {
	sc.shards[i] = nil
	for len(sc.shards) > 0 && sc.shards[len(sc.shards)-1] == nil {
		sc.shards = sc.shards[:len(sc.shards)-1]
	}
}

// empty reports whether the scope holds nothing, on either side.
func (sc *scope) empty() bool {
	return len(sc.objects) == 0 && len(sc.shards) == 0
}

type limits struct {
	results int
	bytes   int
}
