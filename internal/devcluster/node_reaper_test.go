package devcluster

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestPinnedPipeOutlivesItsReferences: the write end of the reaper's pipe
// stays open while the program holds no reference to it, through
// collections, until it is unpinned. Closed by the collector, it ended the
// pipe, and the reaper removed a running node whose Cluster the caller had
// dropped (TestNodeCleanupAfterCrash's helper keeps only the Config, and
// lost its node's network while it waited for its pod).
func TestPinnedPipeOutlivesItsReferences(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	unpin := pin(w)
	defer unpin()
	w = nil // dropped: only pin holds it now
	// A collection has run the finalizers of what it found unreachable
	// once a cleanup of an object dropped with w has run.
	collected := make(chan struct{})
	func() {
		sentinel := new([64]byte)
		runtime.AddCleanup(sentinel, func(ch chan struct{}) { close(ch) }, collected)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for gone := false; !gone; {
		runtime.GC()
		select {
		case <-collected:
			gone = true
		case <-time.After(10 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("no collection ran the sentinel's cleanup in 10 s")
			}
		}
	}
	// Finalizers run on their own goroutine: watch the pipe through a few
	// more collections. A closed write end reads as the end at once.
	buf := make([]byte, 1)
	for range 10 {
		runtime.GC()
		if err := r.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the pipe ended (%v): the collector closed its write end while pinned", err)
		}
	}
}
