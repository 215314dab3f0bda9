package runtime

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"
)

// TestStateKeepsTheStampOfItsPosition: a position is saved with the
// rotation stamp listed when it was reached, not the newest listed by the
// time it is saved (evaluation can lag behind reading by a rotation or
// more). Saved with the newest, a file rotated between the two read as
// rotated before the position, and a restart skipped it.
func TestStateKeepsTheStampOfItsPosition(t *testing.T) {
	f := &FileInput{o: FileOptions{StateFile: filepath.Join(t.TempDir(), "offset"), Logger: slog.New(slog.DiscardHandler)}}
	reached := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	f.newest = reached.Add(time.Hour)
	want := fileState{fileID: fileID{Inode: 7, HeadLen: 3, Head: "abc"}, Offset: 10, Rotated: reached}
	f.saveState(want)
	got, err := (&FileInput{o: f.o}).loadState()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("loaded %+v, want the state saved, %+v", got, want)
	}
}
