package runtime

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vilaca/portal/internal/clustercache"
	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
)

// Replay evaluates the runtime rules of eng on each request of the
// recorded audit log at path (JSON lines, as the API server's log backend
// writes it; lines may also be Falco alerts, as Falco's json_output writes
// them), in order, as a live Portal with --runtime would: one
// evaluation per request, deduplicated per rule, actor and target over
// window of the events' own time, which is the clock. targets holds the
// objects the events are about (nil: none). Each finding goes to found with
// the line of its event. It returns how many events it read; an error
// names the path, and the line of an event that does not decode. This is
// `portal eval --events` and a test file's events.
func Replay(ctx context.Context, eng *engine.Engine, targets clustercache.Reader, path string, window time.Duration, found func(line int, ev *event.Event, r core.Result)) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if targets == nil {
		targets = (&clustercache.StaticBuilder{}).Build()
	}
	now := &eventClock{}
	src := NewSource(Options{
		Engine: eng, Targets: targets, DedupWindow: window,
		Clock: now, Logger: slog.New(slog.DiscardHandler),
	}, NewMetrics(prometheus.NewRegistry()))
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), MaxLineBytes)
	line, read := 0, 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		ev, err := event.DecodeRecorded(sc.Bytes())
		if err != nil {
			return read, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		read++
		now.t = ev.StageTimestamp
		input := InputFile
		if ev.Falco != nil {
			input = InputFalco
		}
		for _, r := range src.Evaluate(ctx, input, ev) {
			found(line, &ev, r)
		}
	}
	if err := sc.Err(); err != nil {
		return read, fmt.Errorf("%s:%d: %w", path, line+1, err)
	}
	return read, nil
}

// eventClock is the time of the event being replayed: a recorded log's
// windows run on its own timestamps.
type eventClock struct{ t time.Time }

func (c *eventClock) Now() time.Time                  { return c.t }
func (c *eventClock) Since(t time.Time) time.Duration { return c.t.Sub(t) }
