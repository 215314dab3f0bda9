// Package stdout is the log sink: one JSON line per finding raised, changed
// and resolved, through log/slog, with the producer that raised it.
package stdout

import (
	"context"
	"log/slog"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/sink/track"
)

// Name is the sink's name.
const Name = "stdout"

// Sink logs findings. It runs on the leader only, so a cluster logs each
// transition once; a new leader logs the findings open when it takes over.
type Sink struct {
	log     *slog.Logger
	tracker *track.Tracker
}

// New returns a sink logging to log (default slog.Default()).
func New(log *slog.Logger) *Sink {
	if log == nil {
		log = slog.Default()
	}
	return &Sink{log: log, tracker: track.New()}
}

// Name implements core.OutputSink.
func (s *Sink) Name() string { return Name }

// Publish implements core.OutputSink.
func (s *Sink) Publish(ctx context.Context, b core.FindingBatch) error {
	for _, d := range s.tracker.Apply(b) {
		raised, resolved, changed := track.Diff(d.Old, d.New)
		for i := range raised {
			s.line(ctx, "raised", &raised[i], b.Full)
		}
		for i := range changed {
			s.line(ctx, "changed", &changed[i], b.Full)
		}
		for i := range resolved {
			s.line(ctx, "resolved", &resolved[i], b.Full)
		}
	}
	return nil
}

func (s *Sink) line(ctx context.Context, event string, f *core.Finding, full bool) {
	attrs := []slog.Attr{
		slog.String("audit", "finding"),
		slog.String("event", event),
		slog.String("producer", f.Producer),
		slog.String("resultID", f.ResultID()),
		slog.String("rule", f.RuleName()),
		slog.String("severity", string(f.Severity())),
		slog.String("result", string(f.Outcome)),
		slog.String("apiVersion", f.Resource.APIVersion),
		slog.String("kind", f.Resource.Kind),
		slog.String("namespace", f.Resource.Namespace),
		slog.String("name", f.Resource.Name),
	}
	if c := f.Category(); c != "" {
		attrs = append(attrs, slog.String("category", c))
	}
	if f.Container != "" {
		attrs = append(attrs, slog.String("container", f.Container))
	}
	if f.Exception != nil {
		attrs = append(attrs, slog.String("exception", f.Exception.String()))
	}
	if event != "resolved" {
		attrs = append(attrs, slog.String("message", core.Truncate(f.Message, core.MaxOutputMessageBytes)))
	}
	attrs = append(attrs, slog.Time("firstSeen", f.FirstSeen))
	if full {
		// A full batch is the state a new leader starts from: findings
		// raised before it took over are logged again, marked so.
		attrs = append(attrs, slog.Bool("takeover", true))
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "audit finding "+event, attrs...)
}
