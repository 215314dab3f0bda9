package findings

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/core"
)

// sinkRunner feeds one sink from the pipeline. It is a manager runnable: for
// a leader-only sink (the default) it starts when this replica becomes the
// leader, so the new leader's first batch is the full current state of every
// producer, and a sink that cannot keep up only ever lags, it never loses a
// change.
type sinkRunner struct {
	sink     core.OutputSink
	pipeline *Pipeline
	metrics  *Metrics
	log      *slog.Logger
	maxBatch int
	// retry is the delay before a batch the sink failed is published
	// again: doubling from Options.MinBackoff to MaxBackoff.
	retry   wait.Backoff
	leading *leadGauge
}

// leadGauge is portal_audit_leader: 1 once every leader-only sink of this
// replica has published the full state (a report sink first adopts the
// reports on the API server, which can take a second or two), 0 as soon as
// one stops. Readiness checks and dashboards read it as "this replica's
// findings are being published".
type leadGauge struct {
	gauge prometheus.Gauge
	want  int32
	ready atomic.Int32
}

func (g *leadGauge) up() {
	if g.ready.Add(1) == g.want {
		g.gauge.Set(1)
	}
}

func (g *leadGauge) down() {
	g.ready.Add(-1)
	g.gauge.Set(0)
}

// needLeader reports whether a sink runs on the leader only: all do unless
// they say otherwise.
func needLeader(s core.OutputSink) bool {
	if l, ok := s.(interface{ NeedLeaderElection() bool }); ok {
		return l.NeedLeaderElection()
	}
	return true
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (r *sinkRunner) NeedLeaderElection() bool { return needLeader(r.sink) }

// Start implements manager.Runnable: it publishes until ctx ends, once every
// producer holds its full state.
func (r *sinkRunner) Start(ctx context.Context) error {
	if !r.pipeline.waitSynced(ctx.Done()) {
		return nil
	}
	name := r.sink.Name()
	leader := r.NeedLeaderElection()
	published := false
	defer func() {
		if leader && published {
			r.leading.down()
		}
	}()
	r.log.Info("findings sink started", "sink", name, "leaderOnly", leader)
	sub := r.pipeline.Subscribe()
	defer sub.Close()

	latency := r.metrics.EventToReport.WithLabelValues(name)
	observe := func(t time.Time) {
		if !t.IsZero() {
			latency.Observe(r.pipeline.clock.Since(t).Seconds())
		}
	}
	async, isAsync := r.sink.(core.RunnableSink)
	var wg sync.WaitGroup
	if isAsync {
		wg.Go(func() { async.Run(ctx, observe) })
	}
	defer wg.Wait()

	backoff := r.retry
	for {
		b, err := sub.Next(ctx, r.maxBatch)
		if err != nil {
			return nil
		}
		if err := r.sink.Publish(ctx, b); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			sub.Retry(b)
			r.metrics.SinkErrors.WithLabelValues(name).Inc()
			delay := backoff.Step()
			r.log.Warn("findings sink failed; retrying", "sink", name, "objects", len(b.Objects), "full", b.Full, "retryIn", delay, "error", err)
			select {
			case <-r.pipeline.clock.After(delay):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		backoff = r.retry
		if leader && !published {
			published = true
			r.leading.up()
		}
		r.metrics.SinkObjects.WithLabelValues(name).Add(float64(len(b.Objects)))
		if !isAsync {
			for _, of := range b.Objects {
				observe(of.Observed)
			}
		}
	}
}
