package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"k8s.io/apimachinery/pkg/util/wait"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/runtime"
)

// appendEvents writes the exec events of ids to path, one JSON line each.
func appendEvents(t *testing.T, path string, ids ...string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, id := range ids {
		// Every id its own actor, so deduplication hides nothing.
		ev := auditEvent(id, "system:serviceaccount:ci:"+id, "create", "pods", "exec", "prod", "web-0")
		ev.Stage = event.StageResponseStarted
		b, _ := json.Marshal(ev)
		if _, err := f.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
	}
}

func ids(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

// runFile follows path until want events have been evaluated in all, then
// stops it (as a restart would).
func runFile(t *testing.T, h *harness, path, state string, want float64, during func()) {
	t.Helper()
	runInput(t, h, newFileInput(h, path, state), want, during)
}

func newFileInput(h *harness, path, state string) *runtime.FileInput {
	return runtime.NewFileInput(runtime.FileOptions{Path: path, StateFile: state, PollInterval: 5 * time.Millisecond}, h.src, h.metrics)
}

// runInput is runFile with the input made by the caller.
func runInput(t *testing.T, h *harness, in *runtime.FileInput, want float64, during func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan struct{}, 2)
	go func() { _ = in.Start(ctx); done <- struct{}{} }()
	go func() { _ = h.src.Start(ctx); done <- struct{}{} }()
	if during != nil {
		during()
	}
	waitFor(t, func() bool { return counter(t, h.metrics.Evaluated) >= want })
	cancel()
	<-done
	<-done
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 2*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatal("condition not met within 20s")
	}
}

// TestFileSurvivesRotationAndRestart: the audit log input reads every
// event once: through a rotation while it runs (the API server renames
// the log and starts a new one), through a restart (it resumes at the
// offset it recorded), and through a rotation while it was stopped (it
// finishes the rotated file before the new one).
func TestFileSurvivesRotationAndRestart(t *testing.T) {
	h, dir, path, state := newLog(t)
	appendEvents(t, path, ids("a", 5)...)
	runFile(t, h, path, state, 10, func() {
		waitFor(t, func() bool { return counter(t, h.metrics.Evaluated) >= 5 })
		if err := os.Rename(path, filepath.Join(dir, "audit-2026-01-01T12-00-00.000.log")); err != nil {
			t.Fatal(err)
		}
		appendEvents(t, path, ids("b", 5)...)
	})
	// Stopped: more lines, then a restart reads only those.
	appendEvents(t, path, ids("c", 3)...)
	runFile(t, h, path, state, 13, nil)
	// Stopped again: lines, a rotation, lines in the new file.
	appendEvents(t, path, ids("d", 2)...)
	if err := os.Rename(path, filepath.Join(dir, "audit-2026-01-01T13-00-00.000.log")); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, path, ids("e", 4)...)
	runFile(t, h, path, state, 19, nil)
	if got := counter(t, h.metrics.Evaluated); got != 19 {
		t.Errorf("evaluated %v events, want each of the 19 once", got)
	}
	if got := counter(t, h.metrics.Findings); got != 19 {
		t.Errorf("findings = %v, want 19", got)
	}
}

// TestFileFollowsEveryRotationWhileStopped: the log rotated twice while
// Portal was stopped; the restart finishes the file it was in, then reads
// the file rotated after it, then the new log. It went from the first
// straight to the new log, and the second rotated file was never read.
func TestFileFollowsEveryRotationWhileStopped(t *testing.T) {
	h, dir, path, state := stoppedThroughTwoRotations(t)
	// Not the API server's stamp: not taken for a rotated file of the log.
	appendEvents(t, filepath.Join(dir, "audit-old.log"), ids("x", 5)...)
	runFile(t, h, path, state, 12, nil)
	if got := counter(t, h.metrics.Evaluated); got != 12 {
		t.Errorf("evaluated %v events, want each of the 12 once", got)
	}
	// And none twice: the twelfth evaluation is the last line of the new
	// log, where the state now stands.
	atTheEnd(t, path, state)
}

// TestFileResumesAtTheOldestRotatedFileLeft: the file the state is in was
// deleted by the rotation while Portal was stopped; the restart reads the
// rotated files left, oldest first, then the new log. It started the new
// log, and every rotated file left was never read.
func TestFileResumesAtTheOldestRotatedFileLeft(t *testing.T) {
	h, dir, path, state := stoppedThroughTwoRotations(t)
	// --audit-log-maxbackup=1: the oldest goes, and b with it.
	if err := os.Remove(filepath.Join(dir, "audit-2026-01-01T09-00-00.000.log")); err != nil {
		t.Fatal(err)
	}
	runFile(t, h, path, state, 10, nil)
	if got := counter(t, h.metrics.Evaluated); got != 10 {
		t.Errorf("evaluated %v events, want a, c and d once each (10)", got)
	}
	atTheEnd(t, path, state)
}

// stoppedThroughTwoRotations evaluates three events of a log (a), stops,
// then writes two more (b) and rotates, three (c) and rotates, and four
// (d) into the new log, as the API server would while Portal is down.
func stoppedThroughTwoRotations(t *testing.T) (h *harness, dir, path, state string) {
	h, dir, path, state = newLog(t)
	appendEvents(t, path, ids("a", 3)...)
	runFile(t, h, path, state, 3, nil)
	appendEvents(t, path, ids("b", 2)...)
	for i, next := range [][]string{ids("c", 3), ids("d", 4)} {
		if err := os.Rename(path, filepath.Join(dir, fmt.Sprintf("audit-2026-01-01T%02d-00-00.000.log", 9+i))); err != nil {
			t.Fatal(err)
		}
		appendEvents(t, path, next...)
	}
	return h, dir, path, state
}

// atTheEnd fails unless state records path's file read to its end.
func atTheEnd(t *testing.T, path, state string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Inode  uint64 `json:"inode"`
		Offset int64  `json:"offset"`
	}
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	if ino := fi.Sys().(*syscall.Stat_t).Ino; st.Inode != ino || st.Offset != fi.Size() {
		t.Errorf("state at inode %d offset %d, want the log's end (inode %d offset %d): an event was read twice", st.Inode, st.Offset, ino, fi.Size())
	}
}

// appendRaw writes data to path as it is.
func appendRaw(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
}

// TestFileRecordsItsOffsetWhenStopped: stopped in the middle of the log
// (its queue full, as under load), the input records the offset of what was
// evaluated, so the next start does not read those events again. It
// recorded only on reaching the end of the file: a stop before that left
// the offset of the last end it reached (none here), and
// TestFileSkipsAnOverLongLineWhole failed now and then, its events
// evaluated twice after a restart.
func TestFileRecordsItsOffsetWhenStopped(t *testing.T) {
	// One worker: the event evaluated is the first (with more, a later one
	// can finish first, and the offset rightly stays before the first).
	h := newHarness(t, execRules, []string{webPod}, runtime.Options{QueueSize: 1, Workers: 1})
	dir := t.TempDir()
	path, state := filepath.Join(dir, "audit.log"), filepath.Join(dir, "offset")
	appendEvents(t, path, ids("a", 300)...)
	runFile(t, h, path, state, 1, nil)
	data, err := os.ReadFile(state)
	if err != nil {
		t.Fatalf("stopped before the end of the log, the input recorded no offset: %v", err)
	}
	var st struct {
		Offset int64 `json:"offset"`
	}
	fi, _ := os.Stat(path)
	if err := json.Unmarshal(data, &st); err != nil || st.Offset <= 0 || st.Offset >= fi.Size() {
		t.Fatalf("recorded %s (%v), want an offset inside the %d bytes of the log", data, err, fi.Size())
	}
}

// TestFileSkipsAnOverLongLineWhole: a line over the bound is dropped and
// counted once, and what follows it up to its newline is not read as a
// line of its own, even when the rest is written after a restart; the
// lines after it are read.
func TestFileSkipsAnOverLongLineWhole(t *testing.T) {
	h, _, path, state := newLog(t)
	dropped := func() float64 {
		return counter(t, h.metrics.Dropped.WithLabelValues(runtime.InputFile, runtime.DropDecode))
	}
	long := []byte(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","auditID":"huge","verb":"` + strings.Repeat("x", runtime.MaxLineBytes))
	appendEvents(t, path, ids("a", 2)...)
	// Only the first part of the line is written when Portal stops.
	appendRaw(t, path, long)
	runFile(t, h, path, state, 2, func() { waitFor(t, func() bool { return dropped() == 1 }) })
	appendRaw(t, path, []byte(strings.Repeat("y", 100<<10)+`","stage":"ResponseComplete"}`+"\n"))
	appendEvents(t, path, ids("b", 2)...)
	runFile(t, h, path, state, 4, nil)
	// And a whole over-long line while it runs.
	appendRaw(t, path, append(long, []byte(`"}`+"\n")...))
	appendEvents(t, path, ids("c", 1)...)
	runFile(t, h, path, state, 5, nil)
	if got := dropped(); got != 2 {
		t.Errorf("lines dropped = %v, want 2 (each over-long line once, its rest never read as a line)", got)
	}
	if got := counter(t, h.metrics.Evaluated); got != 5 {
		t.Errorf("evaluated = %v, want the 5 events around the long lines", got)
	}
}

// TestFileReadsAgainWhatWasNotEvaluated: events read and queued but not yet
// evaluated when Portal stops (here its workers never ran, as on a replica
// that does not lead) are read again by the next start and evaluated, each
// once, and those evaluated before are not. The input recorded the offset
// of what it had queued, and those events were lost with the queue.
func TestFileReadsAgainWhatWasNotEvaluated(t *testing.T) {
	dir := t.TempDir()
	path, state := filepath.Join(dir, "audit.log"), filepath.Join(dir, "offset")
	appendEvents(t, path, ids("a", 3)...)
	runFile(t, newHarness(t, execRules, []string{webPod}, runtime.Options{}), path, state, 3, nil)

	appendEvents(t, path, ids("b", 5)...)
	stopped := newHarness(t, execRules, []string{webPod}, runtime.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	in := runtime.NewFileInput(runtime.FileOptions{Path: path, StateFile: state, PollInterval: 5 * time.Millisecond}, stopped.src, stopped.metrics)
	done := make(chan struct{})
	go func() { _ = in.Start(ctx); close(done) }()
	waitFor(t, func() bool {
		return counter(t, stopped.metrics.QueueDepth.WithLabelValues(runtime.InputFile)) == 5
	})
	cancel()
	<-done
	if got := counter(t, stopped.metrics.Evaluated); got != 0 {
		t.Fatalf("evaluated %v events with no worker running", got)
	}

	// The restart: a new process, its queue empty.
	h := newHarness(t, execRules, []string{webPod}, runtime.Options{})
	appendEvents(t, path, ids("c", 2)...)
	runFile(t, h, path, state, 7, nil)
	// Seven evaluated and the recorded offset at the end: every event
	// after the first three, and those three not again (reading them again
	// would have taken ten evaluations to reach the end).
	if got := counter(t, h.metrics.Evaluated); got != 7 {
		t.Errorf("evaluated %v events after the restart, want the 5 queued and never evaluated and the 2 new, each once", got)
	}
	data, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Offset int64 `json:"offset"`
	}
	fi, _ := os.Stat(path)
	if err := json.Unmarshal(data, &st); err != nil || st.Offset != fi.Size() {
		t.Errorf("recorded %s (%v), want the offset of the end, %d", data, err, fi.Size())
	}
}
