package wordset

import (
	"fmt"
	"strings"
	"testing"

	ahocorasick "github.com/petar-dambovaliev/aho-corasick"
)

// library answers the same question with the Aho-Corasick library Coraza's
// @pm uses, the reference these tests hold the Set to.
func library(words []string) func(string) bool {
	b := ahocorasick.NewAhoCorasickBuilder(ahocorasick.Opts{
		AsciiCaseInsensitive: true,
		MatchKind:            ahocorasick.LeftMostLongestMatch,
		DFA:                  true,
	})
	ac := b.Build(words)
	return func(s string) bool { return ac.Iter(s).Next() != nil }
}

func TestContains(t *testing.T) {
	words := []string{"union", "select", "<script", "/etc/passwd", "he", "she", "hers"}
	set := New(words)
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"", false},
		{"1 UNION ALL", true},
		{"SeLeCt", true},
		{"selec", false},
		{"<SCRIPT>", true},
		{"cat /ETC/PASSWD", true},
		{"ushers", true},      // "she" found through a failure link
		{"sh", false},         // a prefix of a word only
		{"unio selec", false}, // prefixes across the whole string
		{"\x00\xffunion", true},
		{"café", false},
	} {
		if got := set.Contains(tc.s); got != tc.want {
			t.Errorf("Contains(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
	if New(nil).Contains("anything") {
		t.Error("an empty set contains something")
	}
	if !New([]string{"x", ""}).Contains("") {
		t.Error("a set with the empty word does not contain it in every string")
	}
}

// TestCaseFoldsASCIIOnly: the Kelvin sign is not k, and bytes outside ASCII
// are compared as they are, as the library does.
func TestCaseFoldsASCIIOnly(t *testing.T) {
	set := New([]string{"kill", "\xc3\xa9t\xc3\xa9"})
	if set.Contains("\u212aill") {
		t.Error("the Kelvin sign matched k")
	}
	if !set.Contains("KILL") || !set.Contains("l'\xc3\xa9t\xc3\xa9") {
		t.Error("a word was missed")
	}
	if set.Contains("\xc3\x89T\xc3\x89") {
		t.Error("É folded to é: only ASCII folds")
	}
}

// TestMemoryBounded: a long word list (the CRS's biggest @pmFromFile list
// is 70 KB) keeps the full rows within DenseBytes and costs a few bytes
// per byte of words beyond them, where a full DFA would take a row of
// byte classes per state.
func TestMemoryBounded(t *testing.T) {
	var words []string
	x := uint32(7)
	total := 0
	for total < 70<<10 {
		var w strings.Builder
		for range 12 {
			x = x*1664525 + 1013904223
			w.WriteByte(" !#$%&()*+,-./0123456789:;<=>?@abcdefghijklmnopqrstuvwxyz[]_{}"[x>>24%62])
		}
		words = append(words, w.String())
		total += w.Len()
	}
	set := New(words)
	if got := 4 * len(set.dense); got > DenseBytes {
		t.Errorf("dense rows take %d bytes, more than DenseBytes (%d)", got, DenseBytes)
	}
	if got, limit := set.Bytes(), DenseBytes+20*total; got > limit {
		t.Errorf("%d bytes of words take %d bytes, more than %d", total, got, limit)
	}
	ref := library(words)
	for i, w := range words[:200] {
		s := fmt.Sprintf("prefix %s suffix", w[:len(w)-1]+string(rune('a'+i%26)))
		if set.Contains(s) != ref(s) {
			t.Fatalf("Contains(%q) = %v, the library says %v", s, set.Contains(s), ref(s))
		}
		if !set.Contains("x" + strings.ToUpper(w)) {
			t.Fatalf("%q not found", w)
		}
	}
}

// FuzzContains holds the Set to the library on random word lists (words
// separated by spaces, as @pm's argument) and subjects, also with only
// the root's row dense so that every other state takes the sparse path.
func FuzzContains(f *testing.F) {
	f.Add("he she his hers", "ushers")
	f.Add("UNION select", "x union")
	f.Add("a ab abc", "zab")
	f.Add("\xff\x00 k", "\u212a")
	f.Add("<script <img", "x<scrip<SCRIPT")
	f.Fuzz(func(t *testing.T, list, subject string) {
		if len(list) > 2000 {
			return
		}
		words := strings.Fields(list)
		if len(words) == 0 {
			return
		}
		want := library(words)(subject)
		for _, dense := range []int{DenseBytes, 1} {
			if got := build(words, dense).Contains(subject); got != want {
				t.Fatalf("words %q, subject %q, dense bytes %d: Contains %v, the library %v", words, subject, dense, got, want)
			}
		}
	})
}

func benchWords() []string {
	return strings.Fields(`union select insert update delete drop alter create exec execute
		xp_cmdshell sleep benchmark waitfor information_schema concat char
		<script javascript: onerror onload eval( document.cookie /etc/passwd
		cmd.exe powershell wget curl base64_decode system( passthru shell_exec`)
}

var benchText = strings.Repeat("Please deliver the parcel after five; the side door is open and the dog is friendly. ", 3)

func BenchmarkContains(b *testing.B) {
	words := benchWords()
	b.Run("wordset", func(b *testing.B) {
		set := New(words)
		b.SetBytes(int64(len(benchText)))
		for b.Loop() {
			if set.Contains(benchText) {
				b.Fatal("match")
			}
		}
	})
	b.Run("library", func(b *testing.B) {
		ref := library(words)
		b.SetBytes(int64(len(benchText)))
		for b.Loop() {
			if ref(benchText) {
				b.Fatal("match")
			}
		}
	})
}
