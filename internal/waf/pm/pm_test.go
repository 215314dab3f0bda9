package pm

import (
	"errors"
	"io/fs"
	"maps"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/corazawaf/coraza/v3/experimental/plugins/plugintypes"
	ahocorasick "github.com/petar-dambovaliev/aho-corasick"

	"github.com/vilaca/portal/internal/waf/operatortest"
)

// reference is Coraza v3.8.1's pm on the same words (its newPM and
// pmEvaluate): the Aho-Corasick library, leftmost-longest, ASCII
// case-insensitive, a length short-cut, up to ten captures.
func reference(words []string, tx *operatortest.Tx, value string) bool {
	b := ahocorasick.NewAhoCorasickBuilder(ahocorasick.Opts{
		AsciiCaseInsensitive: true,
		MatchKind:            ahocorasick.LeftMostLongestMatch,
		DFA:                  true,
	})
	ac := b.Build(words)
	minLen := 0
	for i, w := range words {
		if w == "" {
			minLen = 0
			break
		}
		if i == 0 || len(w) < minLen {
			minLen = len(w)
		}
	}
	if len(value) < minLen {
		return false
	}
	iter := ac.Iter(value)
	if !tx.Capture {
		return iter.Next() != nil
	}
	n := 0
	for m := iter.Next(); m != nil && n < 10; m = iter.Next() {
		tx.CaptureField(n, value[m.Start():m.End()])
		n++
	}
	return n > 0
}

func evaluate(t testing.TB, args, value string, capturing bool) (bool, map[int]string) {
	op, err := New(plugintypes.OperatorOptions{Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	tx := &operatortest.Tx{Capture: capturing}
	return op.Evaluate(tx, value), tx.Fields
}

// check holds @pm to the reference for one argument and subject, with and
// without capture.
func check(t testing.TB, args, value string) {
	words := strings.Split(strings.ToLower(args), " ")
	for _, capturing := range []bool{false, true} {
		got, gotFields := evaluate(t, args, value, capturing)
		ref := &operatortest.Tx{Capture: capturing}
		want := reference(words, ref, value)
		if got != want || !maps.Equal(gotFields, ref.Fields) {
			t.Fatalf("@pm %q on %q (capture %v): %v %v, Coraza's pm %v %v",
				args, value, capturing, got, gotFields, want, ref.Fields)
		}
	}
}

func TestPM(t *testing.T) {
	for _, tc := range []struct{ args, value string }{
		{"WebZIP WebCopier Webster", "Mozilla/5.0 webzip/1.0"},
		{"<script> javascript: onerror=", "a <SCRIPT> and JavaScript: and onerror="},
		{"he she hers his", "ushers and his"},
		{"a b c d e f g h i j k l", "abcdefghijkl"}, // more than ten matches
		{"select", "sel"}, // shorter than every word
		{"a  b", "xyz"},   // two spaces: an empty word
		{"", "anything"},
		{"kill", "\u212aill"}, // ASCII folds only
		{"caf\xc3\xa9", "CAF\xc3\xa9"},
	} {
		check(t, tc.args, tc.value)
	}
}

func FuzzPM(f *testing.F) {
	f.Add("he she hers", "ushers")
	f.Add("a  b", "")
	f.Add("UNION select", "1 uNiOn 2")
	f.Fuzz(func(t *testing.T, args, value string) {
		if len(args) > 1000 {
			return
		}
		check(t, args, value)
	})
}

// TestPMFromFile reads a data file as Coraza does: one word per line,
// trimmed and lower-cased, without blank lines and comments, from the
// first directory that has it.
func TestPMFromFile(t *testing.T) {
	root := fstest.MapFS{
		"rules/words.data": {Data: []byte("# a comment\n\n  /ETC/Passwd  \r\n.htaccess\n#not-a-word\n")},
	}
	op, err := NewFromFile(plugintypes.OperatorOptions{Arguments: "words.data", Path: []string{"missing", "rules"}, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	for value, want := range map[string]bool{
		"cat /etc/passwd": true, "GET /.HTACCESS": true, "not-a-word": false, "a comment": false, "": false,
	} {
		if got := op.Evaluate(&operatortest.Tx{}, value); got != want {
			t.Errorf("@pmFromFile on %q = %v, want %v", value, got, want)
		}
	}
	tx := &operatortest.Tx{Capture: true}
	if !op.Evaluate(tx, "x /Etc/passwd y") || tx.Fields[0] != "/Etc/passwd" {
		t.Errorf("capture %v, want the match as written", tx.Fields)
	}
	if _, err := NewFromFile(plugintypes.OperatorOptions{Arguments: "none.data", Path: []string{"rules"}, Root: root}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want not exist", err)
	}
	if _, err := NewFromFile(plugintypes.OperatorOptions{Arguments: "words.data", Root: root}); !errors.Is(err, errEmptyDirs) {
		t.Errorf("no directories: %v", err)
	}
}

func BenchmarkPM(b *testing.B) {
	args := "<script javascript: onerror onload eval( document.cookie /etc/passwd cmd.exe powershell wget curl"
	value := strings.Repeat("Please deliver the parcel after five; the side door is open. ", 4)
	op, err := New(plugintypes.OperatorOptions{Arguments: args})
	if err != nil {
		b.Fatal(err)
	}
	tx := &operatortest.Tx{Capture: true}
	b.Run("portal", func(b *testing.B) {
		for b.Loop() {
			op.Evaluate(tx, value)
		}
	})
	words := strings.Split(strings.ToLower(args), " ")
	bld := ahocorasick.NewAhoCorasickBuilder(ahocorasick.Opts{AsciiCaseInsensitive: true, MatchKind: ahocorasick.LeftMostLongestMatch, DFA: true})
	ac := bld.Build(words)
	b.Run("coraza", func(b *testing.B) {
		for b.Loop() {
			ac.Iter(value).Next()
		}
	})
}
