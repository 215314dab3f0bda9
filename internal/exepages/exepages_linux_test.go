package exepages

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func TestReadOnlyMappings(t *testing.T) {
	const exe = "/usr/local/bin/portal dir/portal"
	maps := strings.Join([]string{
		"00400000-02860000 r-xp 00000000 fe:00 10010633                           " + exe,
		"02860000-052da000 r--p 02460000 fe:00 10010633                           " + exe,
		"052da000-053cb000 rw-p 04eda000 fe:00 10010633                           " + exe,
		"053cb000-07422000 rw-p 00000000 00:00 0 ",
		"06000000-06001000 r--s 00000000 fe:00 10010633                           " + exe,
		"7f0000000000-7f0000001000 r--p 00000000 fe:00 2                          /usr/local/bin/other",
		"7faa6e4a4000-7faa6e4a6000 r-xp 00000000 00:00 0                          [vdso]",
	}, "\n")
	got, err := readOnlyMappings(strings.NewReader(maps), exe)
	if err != nil {
		t.Fatal(err)
	}
	want := []addrRange{{0x400000, 0x2860000}, {0x2860000, 0x52da000}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %#v, want the text and read-only data mappings %#v: never the writable, shared or other files' ones", got, want)
	}
	if _, err := readOnlyMappings(strings.NewReader("zz-00 r--p 0 0 0 "+exe), exe); err == nil {
		t.Fatal("a malformed address range was accepted")
	}
}

// The test binary drops its own start-up pages and goes on running: code
// and read-only data it uses afterwards are read back in.
func TestDropExecutablePages(t *testing.T) {
	n, err := Drop()
	if err != nil {
		t.Fatal(err)
	}
	if n <= 0 {
		t.Fatalf("advised %d bytes: found no read-only mapping of the executable", n)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Code that has not run since the drop, and a table in read-only data.
	if _, err := os.Stat(exe); err != nil || !strings.Contains(strings.ToUpper("portal"), "PORTAL") {
		t.Fatalf("the process does not run correctly after the drop: %v", err)
	}
	if got, err := readOnlyMappings(strings.NewReader("1000-2000 r-xp 0 0 0 /x"), "/x"); err != nil || len(got) != 1 {
		t.Fatalf("the parser, not run since the drop, gives %v, %v", got, err)
	}
}

// FuzzReadOnlyMappings: whatever the listing, the parser returns ranges of
// the named file only, never an inverted one, or an error; it never panics.
func FuzzReadOnlyMappings(f *testing.F) {
	f.Add("00400000-02860000 r-xp 00000000 fe:00 10010633   /bin/portal\n053cb000-07422000 rw-p 00000000 00:00 0 \n")
	f.Add("02860000-052da000 r--p 02460000 fe:00 1 /bin/portal (deleted)\n")
	f.Add("ffffffffffffffff-0 r--p 0 0 0 /bin/portal\n")
	f.Fuzz(func(t *testing.T, maps string) {
		got, err := readOnlyMappings(strings.NewReader(maps), "/bin/portal")
		if err != nil {
			return
		}
		if n := strings.Count(maps, "/bin/portal"); len(got) > n {
			t.Fatalf("%d ranges from %d lines naming the file", len(got), n)
		}
		for _, r := range got {
			if r.end < r.start {
				t.Fatalf("inverted range %#x-%#x", r.start, r.end)
			}
		}
	})
}
