package runtime

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The rotated files of a log are ordered by the time in their names, the
// files that are not are left out, and the file after one that is gone is
// the first rotated after its last write.
func TestNextBackup(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	ino := map[string]uint64{}
	for _, name := range []string{
		"audit-2026-01-01T11-00-00.000.log", "audit-2026-01-01T09-00-00.000.log", "audit-2026-01-01T10-00-00.000.log",
		"audit.log", "audit-old.log", "audit-2026-01-01T08-00-00.000.log.gz", "other-2026-01-01T09-30-00.000.log",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("{}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		ino[name] = fi.Sys().(*syscall.Stat_t).Ino
	}
	var listed []string
	bs, err := backups(os.ReadDir, path)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		listed = append(listed, filepath.Base(b.path))
	}
	want := []string{"audit-2026-01-01T09-00-00.000.log", "audit-2026-01-01T10-00-00.000.log", "audit-2026-01-01T11-00-00.000.log"}
	if len(listed) != len(want) {
		t.Fatalf("backups = %v, want %v", listed, want)
	}
	for i := range want {
		if listed[i] != want[i] {
			t.Fatalf("backups = %v, want %v", listed, want)
		}
	}
	at := func(hh, mm int) time.Time { return time.Date(2026, 1, 1, hh, mm, 0, 0, time.UTC) }
	for _, c := range []struct {
		what     string
		ino      uint64
		modified time.Time
		want     string // "" for none
	}{
		{"the first", ino[want[0]], at(9, 0), want[1]},
		{"the middle", ino[want[1]], at(10, 0), want[2]},
		{"the last: the log is next", ino[want[2]], at(11, 0), ""},
		{"the live log", ino["audit.log"], at(12, 0), ""},
		{"gone, written before 10:00", 1, at(9, 59), want[1]},
		{"gone, written before 09:00", 1, at(8, 30), want[0]},
		{"gone, after every rotated file", 1, at(11, 30), ""},
		{"gone, its time unknown", 1, time.Time{}, ""},
	} {
		b, ok := nextBackup(bs, c.ino, c.modified)
		got := ""
		if ok {
			got = filepath.Base(b.path)
		}
		if got != c.want {
			t.Errorf("%s: next = %q, want %q", c.what, got, c.want)
		}
	}
}
