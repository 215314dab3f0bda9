package sink

import (
	"context"
	"time"

	"github.com/vilaca/portal/internal/core"
)

// placed returns s running where its registration says: the findings
// pipeline asks a sink's NeedLeaderElection, so the registry, not each
// sink type, decides.
func placed(s core.OutputSink, leaderOnly bool) core.OutputSink {
	p := onReplicas{OutputSink: s, leaderOnly: leaderOnly}
	if r, ok := s.(core.RunnableSink); ok {
		return runnable{onReplicas: p, run: r}
	}
	return p
}

// onReplicas is a sink placed by its registration.
type onReplicas struct {
	core.OutputSink
	leaderOnly bool
}

// NeedLeaderElection implements manager.LeaderElectionRunnable's question.
func (p onReplicas) NeedLeaderElection() bool { return p.leaderOnly }

// runnable keeps a placed sink's background work.
type runnable struct {
	onReplicas
	run core.RunnableSink
}

// Run implements core.RunnableSink.
func (r runnable) Run(ctx context.Context, delivered func(observed time.Time)) {
	r.run.Run(ctx, delivered)
}
