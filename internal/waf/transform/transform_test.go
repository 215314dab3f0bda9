package transform

import (
	"strings"
	"testing"
	"unsafe"
)

// seeds are inputs on both sides of every fast path.
var seeds = []string{
	"", " ", ".", "..", "/", "a", "lorem ipsum dolor", "lorem  ipsum", "a\tb", "a\r\nb",
	"%41", "a+b", "%", "%u0041", "&amp;", "&lt;script&gt;", "a & b", "/* x */", "a/*", "*/",
	"/etc/passwd", "a/./b", "a//b", "../x", "file.txt", "file.txt.", "file.txt ", "x:y",
	"C:\\Windows\\x", "a\\b", "\u00a0", "caf\u00e9", "a\u0085b", "\xff\xfe", "日本語 テキスト",
	strings.Repeat("lorem ipsum ", 30),
}

// FuzzTransform holds every transformation this package registers to
// Coraza's own, on the result, the changed flag and the error.
func FuzzTransform(f *testing.F) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, orig := range originals {
			ours, err := corazaTransformation(name)
			if err != nil {
				t.Fatalf("%s is no longer registered: %v", name, err)
			}
			got, gotChanged, gotErr := ours(s)
			want, wantChanged, wantErr := orig(s)
			if got != want || gotChanged != wantChanged || (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("%s(%q) = %q, %v, %v; Coraza's gives %q, %v, %v", name, s, got, gotChanged, gotErr, want, wantChanged, wantErr)
			}
		}
	})
}

// TestRegistered checks that Coraza runs this package's versions: an input
// the fast path answers comes back as the same string, where Coraza's
// compressWhitespace and replaceComments build a copy.
func TestRegistered(t *testing.T) {
	if len(originals) != len(fastPaths)+1 {
		t.Fatalf("%d originals kept for %d registrations", len(originals), len(fastPaths)+1)
	}
	in := strings.Repeat("lorem ipsum ", 4) + "x"
	for _, name := range []string{"compressWhitespace", "replaceComments"} {
		ours, err := corazaTransformation(name)
		if err != nil {
			t.Fatal(err)
		}
		got, _, _ := ours(in)
		want, _, _ := originals[name](in)
		if got != want {
			t.Fatalf("%s changed %q to %q", name, in, got)
		}
		if !sameString(got, in) {
			t.Errorf("%s copied an input it leaves as it is: Coraza's version is registered, not this package's", name)
		}
		if wantSame := sameString(want, in); wantSame {
			t.Errorf("Coraza's %s returned its input as is; the test no longer tells the two apart", name)
		}
	}
}

// sameString reports whether a and b are the same bytes in memory.
func sameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}
