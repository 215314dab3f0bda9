package policyreport

import (
	"context"
	"math"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vilaca/portal/internal/core"
)

// write is one report write a writer took: an apply of data, or a delete
// when data is nil.
type write struct {
	sc      *scope
	shard   int
	data    []byte
	digest  string
	pending map[core.ObjectKey]time.Time
}

// Run implements core.RunnableSink: writers apply the dirty reports until
// ctx ends, and delivered receives the observation time of every change a
// successful write carried.
func (s *Sink) Run(ctx context.Context, delivered func(observed time.Time)) {
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() { s.writeLoop(ctx, delivered) })
	}
	wg.Wait()
}

func (s *Sink) writeLoop(ctx context.Context, delivered func(time.Time)) {
	timer := s.o.Clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		w, done, wake, retryIn := s.next()
		deliver(delivered, done)
		if w == nil {
			if retryIn > 0 {
				timer.Reset(retryIn)
			}
			select {
			case <-wake:
			case <-timer.C():
			case <-ctx.Done():
				return
			}
			continue
		}
		err := s.apply(ctx, w)
		if ctx.Err() != nil {
			s.giveBack(w)
			return
		}
		deliver(delivered, s.settle(w, err))
	}
}

func deliver(delivered func(time.Time), times []time.Time) {
	if delivered == nil {
		return
	}
	for _, t := range times {
		delivered(t)
	}
}

// next takes the report dirty longest that no writer holds and whose
// backoff passed, and renders it. With none, it returns the channel that
// signals new work and how soon a held-back report is due (0: none).
// Reports that need no write (content unchanged, or empty and never
// written) are settled on the way; done are their changes' observations.
func (s *Sink) next() (w *write, done []time.Time, wake <-chan struct{}, retryIn time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		now := s.o.Clock.Now()
		var best *scope
		bestShard := -1
		var due time.Time
		for _, sc := range s.scopes {
			for i, sh := range sc.shards {
				if sh == nil || !sh.dirty || sh.inflight {
					continue
				}
				if sh.retryAt.After(now) {
					if due.IsZero() || sh.retryAt.Before(due) {
						due = sh.retryAt
					}
					continue
				}
				if best == nil || sh.dirtySince.Before(best.shards[bestShard].dirtySince) {
					best, bestShard = sc, i
				}
			}
		}
		if best == nil {
			if !due.IsZero() {
				retryIn = max(due.Sub(now), time.Millisecond)
			}
			return nil, done, s.changed, retryIn
		}
		w, skipped := s.takeLocked(best, bestShard)
		if w != nil {
			return w, done, nil, 0
		}
		done = append(done, skipped...)
	}
}

// takeLocked marks shard i of sc as being written and renders it; when no
// write is needed it settles the shard and returns the observations.
func (s *Sink) takeLocked(sc *scope, i int) (*write, []time.Time) {
	sh := sc.shards[i]
	w := &write{sc: sc, shard: i}
	if len(sh.objects) > 0 {
		data, digest, dropped, err := buildReport(s.format, s.names, s.owners, sc, i, s.o.MaxBytes)
		s.setDroppedLocked(sc, i, dropped)
		if err != nil {
			// Encoding our own types cannot fail short of a bug: log it
			// and leave the report as it is.
			s.log.Error("policy report not rendered", "namespace", sc.namespace, "report", s.names.report(i), "error", err)
			return nil, clearPending(sh)
		}
		if digest == sh.written && sh.exists {
			return nil, clearPending(sh)
		}
		w.data, w.digest = data, digest
	} else {
		s.setDroppedLocked(sc, i, 0)
		if !sh.exists {
			done := clearPending(sh)
			s.dropLocked(sc, i)
			return nil, done
		}
	}
	sh.dirty, sh.inflight = false, true
	w.pending, sh.pending = sh.pending, nil
	return w, nil
}

// setDroppedLocked records how many results shard i of sc could not show,
// warning when that changes: results cut are findings nobody sees in a
// report.
func (s *Sink) setDroppedLocked(sc *scope, i, dropped int) {
	sh := sc.shards[i]
	if dropped == sh.dropped {
		return
	}
	s.metrics.Dropped.Add(float64(dropped - sh.dropped))
	if dropped > 0 {
		s.log.Warn("policy report results cut to stay under the report size limit; the object's remaining findings are in the logs and alerts only",
			"namespace", sc.namespace, "report", s.names.report(i), "dropped", dropped, "maxBytes", s.o.MaxBytes)
	}
	sh.dropped = dropped
}

// clearPending marks a shard clean and returns its observations.
func clearPending(sh *shard) []time.Time {
	sh.dirty = false
	out := make([]time.Time, 0, len(sh.pending))
	for _, t := range sh.pending {
		out = append(out, t)
	}
	sh.pending = nil
	return out
}

// apply writes (or deletes) the report of w.
func (s *Sink) apply(ctx context.Context, w *write) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(s.format.gv.WithKind(s.format.kind(w.sc.namespace)))
	u.SetNamespace(w.sc.namespace)
	u.SetName(s.names.report(w.shard))
	start := s.o.Clock.Now()
	if w.data == nil {
		s.metrics.Writes.WithLabelValues("delete").Inc()
		err := client.IgnoreNotFound(s.o.Client.Delete(ctx, u))
		s.metrics.WriteSeconds.WithLabelValues("delete").Observe(s.o.Clock.Since(start).Seconds())
		return err
	}
	s.metrics.Writes.WithLabelValues("apply").Inc()
	s.metrics.Size.Observe(float64(len(w.data)))
	// The report is sent as rendered: no second encoding.
	err := s.o.Client.Patch(ctx, u, client.RawPatch(types.ApplyPatchType, w.data), client.FieldOwner(FieldOwner), client.ForceOwnership)
	s.metrics.WriteSeconds.WithLabelValues("apply").Observe(s.o.Clock.Since(start).Seconds())
	return err
}

// settle records the outcome of one write in the model and returns the
// observations it delivered. A failed write leaves the report dirty, held
// back by a doubling backoff.
func (s *Sink) settle(w *write, err error) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := w.sc.shards[w.shard]
	sh.inflight = false
	switch {
	case err == nil && w.data == nil:
		sh.exists, sh.written, sh.retry = false, "", nil
		if !sh.dirty && len(sh.objects) == 0 {
			s.dropLocked(w.sc, w.shard)
		}
	case err == nil:
		sh.exists, sh.written, sh.retry = true, w.digest, nil
	case gone(err):
		// The namespace is gone or terminating: nothing to report there;
		// its objects' deletions will follow.
		s.log.Debug("policy report not written: namespace gone", "namespace", w.sc.namespace, "report", s.names.report(w.shard), "error", err)
		sh.retry = nil
	default:
		s.metrics.Errors.Inc()
		if sh.retry == nil {
			sh.retry = &wait.Backoff{Duration: s.o.RetryMin, Factor: 2, Cap: s.o.RetryMax, Steps: math.MaxInt32}
		}
		backoff := sh.retry.Step()
		sh.retryAt = s.o.Clock.Now().Add(backoff)
		s.log.Warn("policy report write failed; retrying", "namespace", w.sc.namespace, "report", s.names.report(w.shard), "retryIn", backoff, "error", err)
		s.requeueLocked(w)
		return nil
	}
	out := make([]time.Time, 0, len(w.pending))
	for _, t := range w.pending {
		out = append(out, t)
	}
	return out
}

// giveBack returns a write abandoned at shutdown to the model, so a later
// Run (this replica leading again) writes it.
func (s *Sink) giveBack(w *write) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.sc.shards[w.shard].inflight = false
	s.requeueLocked(w)
}

// requeueLocked marks the shard of an unwritten write dirty again, keeping
// the observations it carried.
func (s *Sink) requeueLocked(w *write) {
	sh := w.sc.shards[w.shard]
	now := s.o.Clock.Now()
	sh.markDirty(now)
	for k, t := range w.pending {
		sh.touch(k, t, now)
	}
}

// dropLocked forgets an empty shard whose report is gone, and the scope once
// it holds nothing.
func (s *Sink) dropLocked(sc *scope, i int) {
	sc.drop(i)
	if sc.empty() && s.scopes[sc.namespace] == sc {
		delete(s.scopes, sc.namespace)
	}
}

func gone(err error) bool {
	return apierrors.IsNotFound(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)
}
