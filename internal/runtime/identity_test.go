package runtime_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/vilaca/portal/internal/runtime"
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
			h := newHarness(t, execRules, []string{webPod}, runtime.Options{})
			dir := t.TempDir()
			path, state := filepath.Join(dir, "audit.log"), filepath.Join(dir, "offset")
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

// TestFileRetriesARotatedFileThatFailsToOpenForAWhile: the rotated file the
// state is in cannot be opened for a moment (the process out of file
// descriptors); the restart waits for it and reads it, then the files
// after it. It took the file for gone and skipped its events.
func TestFileRetriesARotatedFileThatFailsToOpenForAWhile(t *testing.T) {
	h, dir, path, state := stoppedThroughTwoRotations(t)
	first := filepath.Join(dir, "audit-2026-01-01T09-00-00.000.log")
	var failed atomic.Int32
	in := newFileInput(h, path, state)
	runtime.SetOpenFile(in, func(name string) (*os.File, error) {
		if name == first && failed.Add(1) <= 3 {
			return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EMFILE}
		}
		return os.Open(name)
	})
	runInput(t, h, in, 12, nil)
	if got := counter(t, h.metrics.Evaluated); got != 12 {
		t.Errorf("evaluated %v events, want each of the 12 once", got)
	}
	if n := failed.Load(); n < 4 {
		t.Errorf("the rotated file was opened %d times, want 3 failures and an open", n)
	}
	atTheEnd(t, path, state)
}

// TestFileResumesFromAStateWithoutAHead: a state an earlier Portal wrote
// (inode and offset, no hash of the file's start) still resumes at its
// offset, not from the log's start.
func TestFileResumesFromAStateWithoutAHead(t *testing.T) {
	h := newHarness(t, execRules, []string{webPod}, runtime.Options{})
	dir := t.TempDir()
	path, state := filepath.Join(dir, "audit.log"), filepath.Join(dir, "offset")
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
