package runtime_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vilaca/portal/internal/runtime"
	"github.com/vilaca/portal/internal/testlog"
)

// TestFileTellsAnotherFileWithTheSameInode: while Portal was stopped, the
// file its state is in was replaced by another with the same inode (here
// truncated and written again, as a copytruncate rotation does; a file
// created after the recorded one was deleted can be given its inode too).
// The restart reads that file from its start, every event of it once.
// It resumed at the recorded offset, skipping the new file's first events
// (and, when the lines differ in length, reading half a line).
func TestFileTellsAnotherFileWithTheSameInode(t *testing.T) {
	for _, c := range []struct {
		name string
		// rotated: the replaced file is a rotated one, the log having
		// rotated after Portal stopped; else it is the log itself.
		rotated bool
	}{{"the log", false}, {"a rotated file", true}} {
		t.Run(c.name, func(t *testing.T) {
			h, dir, path, state := newLog(t)
			appendEvents(t, path, ids("a", 3)...)
			runFile(t, h, path, state, 3, nil)
			replaced, want := path, 9.0
			if c.rotated {
				replaced = filepath.Join(dir, "audit-2026-01-01T09-00-00.000.log")
				if err := os.Rename(path, replaced); err != nil {
					t.Fatal(err)
				}
				appendEvents(t, path, ids("c", 2)...)
				want += 2
			}
			// Six lines as long as the three read: the recorded offset
			// falls on a line's start in the file that replaced them.
			if err := os.Truncate(replaced, 0); err != nil {
				t.Fatal(err)
			}
			appendEvents(t, replaced, ids("b", 6)...)
			runFile(t, h, path, state, want, nil)
			if got := counter(t, h.metrics.Evaluated); got != want {
				t.Errorf("evaluated %v events, want the 3 read before and every event of the files after, once each (%v)", got, want)
			}
			atTheEnd(t, path, state)
		})
	}
}

// TestFileResumesFromAStateWithoutAHead: a state an earlier Portal wrote
// (inode and offset, no hash of the file's start) still resumes at its
// offset, not from the log's start.
func TestFileResumesFromAStateWithoutAHead(t *testing.T) {
	h, _, path, state := newLog(t)
	appendEvents(t, path, ids("a", 3)...)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	old := fmt.Sprintf(`{"inode":%d,"offset":%d}`, fi.Sys().(*syscall.Stat_t).Ino, fi.Size())
	if err := os.WriteFile(state, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, path, ids("b", 2)...)
	runFile(t, h, path, state, 2, nil)
	if got := counter(t, h.metrics.Evaluated); got != 2 {
		t.Errorf("evaluated %v events, want the 2 after the recorded offset", got)
	}
	atTheEnd(t, path, state)
}

// rewrite truncates path and writes the events of ids into it: the same
// inode, another file.
func rewrite(t *testing.T, path string, ids ...string) {
	t.Helper()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, path, ids...)
}

// TestFileTellsALogWrittenAgainFromALaterOne: the log the state is in has
// another start after a restart. When the log did not rotate since the
// state was saved, it was written again in place (copytruncate): read from
// its start, and nothing else. When a file rotated since, the recorded
// file was deleted by the rotation and the log given its inode: the rotated
// files left come first. Reading the rotated files in the first case read
// again every event they held; reading only the log in the second skipped
// theirs.
func TestFileTellsALogWrittenAgainFromALaterOne(t *testing.T) {
	t.Run("written again", func(t *testing.T) {
		h, dir, path, state := newLog(t)
		appendEvents(t, path, ids("a", 4)...)
		runFile(t, h, path, state, 4, nil)
		// Rotated an hour before the state below was saved.
		rotatedAt := time.Now().Add(-time.Hour).UTC().Format("2006-01-02T15-04-05.000")
		if err := os.Rename(path, filepath.Join(dir, "audit-"+rotatedAt+".log")); err != nil {
			t.Fatal(err)
		}
		appendEvents(t, path, ids("c", 3)...)
		runFile(t, h, path, state, 7, nil)
		rewrite(t, path, ids("b", 6)...)
		runFile(t, h, path, state, 13, nil)
		if got := counter(t, h.metrics.Evaluated); got != 13 {
			t.Errorf("evaluated %v events, want a and c once and the log written again from its start (13)", got)
		}
		atTheEnd(t, path, state)
	})
	t.Run("given the inode of a deleted file", func(t *testing.T) {
		h, dir, path, state := newLog(t)
		stamp := func(d time.Duration) string {
			return filepath.Join(dir, "audit-"+time.Now().Add(d).UTC().Format("2006-01-02T15-04-05.000")+".log")
		}
		// A rotated file is listed when the log is read: the state holds
		// its stamp.
		appendEvents(t, stamp(-2*time.Hour), "o")
		appendEvents(t, path, ids("a", 3)...)
		runFile(t, h, path, state, 3, nil)
		// The log rotated, the rotation deleted the recorded file and the
		// one before, and the log now has the recorded file's inode. The
		// file rotated since is stamped an hour after the one listed.
		files, _ := filepath.Glob(filepath.Join(dir, "audit-*.log"))
		for _, f := range files {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
		appendEvents(t, stamp(-time.Hour), ids("c", 2)...)
		rewrite(t, path, ids("b", 6)...)
		runFile(t, h, path, state, 11, nil)
		if got := counter(t, h.metrics.Evaluated); got != 11 {
			t.Errorf("evaluated %v events, want a, the rotated file's and the log's, once each (11)", got)
		}
		atTheEnd(t, path, state)
	})
}

// TestFileSkipsOnlyAnUnreadableFileNamedOtherwise: the file the state is
// in was renamed by a rotation the API server's does not make
// (audit.log.1) and cannot be opened; of the API server's rotated files,
// those rotated after its last write are read, not the older ones. It read
// every rotated file again.
func TestFileSkipsOnlyAnUnreadableFileNamedOtherwise(t *testing.T) {
	h, dir, path, state := newLog(t)
	appendEvents(t, filepath.Join(dir, "audit-2026-01-01T09-00-00.000.log"), "o")
	appendEvents(t, path, ids("a", 3)...)
	runFile(t, h, path, state, 3, nil)
	closed := filepath.Join(dir, "audit.log.1")
	if err := os.Rename(path, closed); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour).UTC().Format("2006-01-02T15-04-05.000")
	appendEvents(t, filepath.Join(dir, "audit-"+later+".log"), ids("c", 2)...)
	appendEvents(t, path, ids("d", 4)...)
	in := newFileInput(h, path, state)
	failOpen(in, closed, syscall.EACCES, 0)
	runInput(t, h, in, 9, nil)
	if got := counter(t, h.metrics.Evaluated); got != 9 {
		t.Errorf("evaluated %v events, want a before, then c and d, once each (9)", got)
	}
	atTheEnd(t, path, state)
}

// TestFileResumesInAFileThatGrewPastItsHead: saved while the log was
// shorter than the start its state hashes (one line), the state still
// names the log once it has grown, and the restart resumes at its offset.
func TestFileResumesInAFileThatGrewPastItsHead(t *testing.T) {
	h, _, path, state := newLog(t)
	appendEvents(t, path, "a")
	runFile(t, h, path, state, 1, nil)
	if n := headLen(t, state); n <= 0 || n >= 1024 {
		t.Fatalf("the state of a one-line log hashes %d bytes, want that line's", n)
	}
	appendEvents(t, path, ids("b", 4)...)
	runFile(t, h, path, state, 5, nil)
	if got := counter(t, h.metrics.Evaluated); got != 5 {
		t.Errorf("evaluated %v events, want each of the 5 once", got)
	}
	if n := headLen(t, state); n != 1024 {
		t.Errorf("the state hashes %d bytes of a grown log, want 1024", n)
	}
	atTheEnd(t, path, state)
}

// recordedOffset is the offset state records (-1 while it cannot be read).
func recordedOffset(state string) int64 {
	var st struct {
		Offset int64 `json:"offset"`
	}
	b, err := os.ReadFile(state)
	if err != nil || json.Unmarshal(b, &st) != nil {
		return -1
	}
	return st.Offset
}

func headLen(t *testing.T, state string) int {
	t.Helper()
	var st struct {
		HeadLen int `json:"headLen"`
	}
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st.HeadLen
}

// TestFileTellsALogWrittenAgainWhileItRuns: the log is truncated and
// written again past the offset between two polls; the input reads it
// from its start. It saw a file as long as before and read on at the
// offset, skipping the first events of the new one.
func TestFileTellsALogWrittenAgainWhileItRuns(t *testing.T) {
	h, _, path, state := newLog(t)
	appendEvents(t, path, ids("a", 3)...)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// Polls far apart next to the rewrite below: the poll after it sees
	// the new file whole.
	in := runtime.NewFileInput(runtime.FileOptions{Path: path, StateFile: state, PollInterval: 200 * time.Millisecond}, h.src, h.metrics)
	runInput(t, h, in, 9, func() {
		// The end recorded: the poll that read the three has stopped
		// reading (it records on reaching the end), so the rewrite falls
		// between two polls, not into a read.
		waitFor(t, func() bool { return recordedOffset(state) == fi.Size() })
		rewrite(t, path, ids("b", 6)...)
	})
	if got := counter(t, h.metrics.Evaluated); got != 9 {
		t.Errorf("evaluated %v events, want the 3 and the 6 of the log written again (9)", got)
	}
	atTheEnd(t, path, state)
}

// TestFileRetriesARotatedFileThatFailsToOpen: the rotated file the state is
// in, or the oldest one left when that is gone, cannot be opened for a
// moment (the process or the system out of file descriptors); the restart
// waits for it and reads it, then the files after it. It took the file for
// gone and skipped its events.
func TestFileRetriesARotatedFileThatFailsToOpen(t *testing.T) {
	for _, c := range []struct {
		name string
		// gone: the file the state is in was deleted.
		gone  bool
		fails string
		errno syscall.Errno
		want  float64
	}{
		{"the one the state is in", false, "audit-2026-01-01T09-00-00.000.log", syscall.EMFILE, 12},
		{"the oldest one left", true, "audit-2026-01-01T10-00-00.000.log", syscall.ENFILE, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, dir, path, state := stoppedThroughTwoRotations(t)
			if c.gone {
				if err := os.Remove(filepath.Join(dir, "audit-2026-01-01T09-00-00.000.log")); err != nil {
					t.Fatal(err)
				}
			}
			fails := filepath.Join(dir, c.fails)
			in := newFileInput(h, path, state)
			opened := failOpen(in, fails, c.errno, 3)
			runInput(t, h, in, c.want, nil)
			if got := counter(t, h.metrics.Evaluated); got != c.want {
				t.Errorf("evaluated %v events, want %v", got, c.want)
			}
			if n := opened.Load(); n < 4 {
				t.Errorf("%s was opened %d times, want 3 failures and an open", c.fails, n)
			}
			atTheEnd(t, path, state)
		})
	}
}

// TestFileRetriesADirectoryThatFailsToList: listing the log's directory
// fails for a moment (the process out of file descriptors) where the input
// looks for the rotated file the state is in, for the file rotated after
// the one it read, or for the rotated files left when the state's is gone;
// each time it tries again at the next poll, and reads every event. It took
// the failure for no rotated file, and skipped theirs.
func TestFileRetriesADirectoryThatFailsToList(t *testing.T) {
	for _, c := range []struct {
		name string
		// gone: the file the state is in was deleted.
		gone bool
		// from and to: the listings that fail, counted from 1.
		from, to int32
		want     float64
	}{
		// Listings: the rotated files (1), the files by inode (2), and
		// the rotated files again once the first is read (3).
		{"the rotated file the state is in", false, 2, 2, 12},
		{"the rotated file after it", false, 3, 3, 12},
		{"the rotated files left", true, 1, 1, 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, dir, path, state := stoppedThroughTwoRotations(t)
			if c.gone {
				if err := os.Remove(filepath.Join(dir, "audit-2026-01-01T09-00-00.000.log")); err != nil {
					t.Fatal(err)
				}
			}
			var listed atomic.Int32
			in := newFileInput(h, path, state)
			runtime.SetReadDir(in, func(name string) ([]os.DirEntry, error) {
				if n := listed.Add(1); n >= c.from && n <= c.to {
					return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EMFILE}
				}
				return os.ReadDir(name)
			})
			runInput(t, h, in, c.want, nil)
			if got := counter(t, h.metrics.Evaluated); got != c.want {
				t.Errorf("evaluated %v events, want %v", got, c.want)
			}
			atTheEnd(t, path, state)
		})
	}
}

// TestFileSkipsOnlyARotatedFileThatCannotBeOpened: the rotated file the
// state is in cannot be opened (its permissions), and an older one is
// still there: its events are skipped, with a warning, and reading goes on
// with the files rotated after it. It went back to the oldest rotated
// file, read it again, came round to the one it could not open, and
// started again, for ever.
func TestFileSkipsOnlyARotatedFileThatCannotBeOpened(t *testing.T) {
	h, dir, path, state := stoppedThroughTwoRotations(t)
	appendEvents(t, filepath.Join(dir, "audit-2026-01-01T08-00-00.000.log"), ids("o", 2)...)
	closed := filepath.Join(dir, "audit-2026-01-01T09-00-00.000.log")
	in := newFileInput(h, path, state)
	failOpen(in, closed, syscall.EACCES, 0)
	runInput(t, h, in, 10, nil)
	if got := counter(t, h.metrics.Evaluated); got != 10 {
		t.Errorf("evaluated %v events, want a before, then c and d, once each (10)", got)
	}
	atTheEnd(t, path, state)
}

// TestFileWaitsForAStateFileItCannotRead: a state file that is there but
// cannot be read (here a link to a directory stands in its place) is not
// taken for none: the input waits, saying why, and resumes where the state
// says once it can be read. It read the log from its start, every event again, and
// would have overwritten the state.
func TestFileWaitsForAStateFileItCannotRead(t *testing.T) {
	h, _, path, state := newLog(t)
	appendEvents(t, path, ids("a", 3)...)
	runFile(t, h, path, state, 3, nil)
	if err := os.Rename(state, state+".saved"); err != nil {
		t.Fatal(err)
	}
	// A link to a directory: the state file's name replaced by the saved
	// one in one rename below, never missing (missing means no state).
	if err := os.Mkdir(state+".dir", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(state+".dir", state); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, path, ids("b", 2)...)
	var logs testlog.Buffer
	in := runtime.NewFileInput(runtime.FileOptions{Path: path, StateFile: state, PollInterval: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, h.src, h.metrics)
	runInput(t, h, in, 5, func() {
		waitFor(t, func() bool {
			return strings.Contains(logs.String(), "audit log state unreadable; trying again at every poll")
		})
		if err := os.Rename(state+".saved", state); err != nil {
			t.Fatal(err)
		}
	})
	if got := counter(t, h.metrics.Evaluated); got != 5 {
		t.Errorf("evaluated %v events, want a before and b after the wait, once each (5)", got)
	}
	atTheEnd(t, path, state)
}

// TestFileGivesUpARotatedFileItCannotReadOn: reading on in the rotated file
// the state is in fails for good (here a handle that cannot read); the
// rest of its events are skipped, with a warning that says so, and reading
// goes on with the files rotated after it. The read error was taken for
// the file's end, and its events went unsaid.
func TestFileGivesUpARotatedFileItCannotReadOn(t *testing.T) {
	h, dir, path, state := stoppedThroughTwoRotations(t)
	// A state without a head, as an earlier Portal wrote: the file is
	// opened without reading its start.
	var st map[string]any
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	delete(st, "head")
	delete(st, "headLen")
	if b, err = json.Marshal(st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, b, 0o600); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "audit-2026-01-01T09-00-00.000.log")
	var logs testlog.Buffer
	in := runtime.NewFileInput(runtime.FileOptions{Path: path, StateFile: state, PollInterval: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, h.src, h.metrics)
	runtime.SetOpenFile(in, func(name string) (*os.File, error) {
		if name == broken {
			return os.OpenFile(name, os.O_WRONLY, 0) // reads fail with EBADF
		}
		return os.Open(name)
	})
	runInput(t, h, in, 10, nil)
	if got := counter(t, h.metrics.Evaluated); got != 10 {
		t.Errorf("evaluated %v events, want a before, then c and d, once each (10)", got)
	}
	if !strings.Contains(logs.String(), "cannot read on in a rotated file; the rest of its events are skipped") {
		t.Errorf("no warning that the rest of the rotated file was skipped; logged:\n%s", logs.String())
	}
	atTheEnd(t, path, state)
}

// TestFileSaysALastingErrorOnce: while the log is not there (the API
// server not started yet), the input says so once, not at every poll, and
// says when it reads again. It wrote a warning four times a second.
func TestFileSaysALastingErrorOnce(t *testing.T) {
	h, _, path, state := newLog(t)
	var logs testlog.Buffer
	in := runtime.NewFileInput(runtime.FileOptions{Path: path, StateFile: state, PollInterval: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, h.src, h.metrics)
	var tries atomic.Int32
	runtime.SetOpenFile(in, func(name string) (*os.File, error) {
		if name == path {
			tries.Add(1)
		}
		return os.Open(name)
	})
	runInput(t, h, in, 2, func() {
		waitFor(t, func() bool { return tries.Load() >= 5 })
		appendEvents(t, path, ids("a", 2)...)
	})
	out := logs.String()
	if n := strings.Count(out, "audit log: trying again at every poll"); n != 1 {
		t.Errorf("%d warnings for the log missing over %d polls, want 1; logged:\n%s", n, tries.Load(), out)
	}
	if !strings.Contains(out, "audit log: reading again") {
		t.Errorf("nothing said when the log could be read again; logged:\n%s", out)
	}
}

// failOpen makes in's opens of name fail with errno: the first times (every
// one when times is 0). It returns the count of opens of name tried.
func failOpen(in *runtime.FileInput, name string, errno syscall.Errno, times int32) *atomic.Int32 {
	var tried atomic.Int32
	runtime.SetOpenFile(in, func(n string) (*os.File, error) {
		if n == name {
			if k := tried.Add(1); times == 0 || k <= times {
				return nil, &os.PathError{Op: "open", Path: n, Err: errno}
			}
		}
		return os.Open(n)
	})
	return &tried
}

// newLog is a harness for the exec rules and, in a new directory, where the
// audit log and its state go.
func newLog(t *testing.T) (h *harness, dir, path, state string) {
	h = newHarness(t, execRules, []string{webPod}, runtime.Options{})
	dir = t.TempDir()
	return h, dir, filepath.Join(dir, "audit.log"), filepath.Join(dir, "offset")
}
