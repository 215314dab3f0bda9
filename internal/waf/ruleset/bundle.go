// Package ruleset compiles SecLang rule sets with Coraza inside a sandbox.
//
// A rule set is a Bundle: SecLang text and the data files its rules read
// (@pmFromFile and friends). Compile checks the bundle against the sandbox
// rules (Check), then compiles it with a root filesystem that holds only the
// bundle's data files and the OWASP Core Rule Set embedded in Portal (FS).
// Every error carries the RuleSource and line it comes from when the bundle
// was assembled from sources with Join.
//
// The RuleSet controller compiles what it caches with this package, and the
// waf-proxy data plane compiles what it fetches from the cache with the same
// function, so both enforce the same sandbox.
package ruleset

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"maps"
	"slices"
	"strings"

	"github.com/google/uuid"
)

// Source is one named piece of SecLang text, a RuleSource's spec.rules.
type Source struct {
	Name  string
	Rules string
}

// Span says which lines of a bundle's Rules came from which source.
type Span struct {
	// Source is the source's name.
	Source string
	// First is the bundle line (1-based) of the source's first line.
	First int
	// Lines is how many lines the source has.
	Lines int
}

// Bundle is a rule set as the cache serves it: SecLang text and data files.
type Bundle struct {
	// Rules is the SecLang text.
	Rules string
	// DataFiles maps a file name to its content.
	DataFiles map[string][]byte
	// Spans, when set, map lines of Rules back to the sources they came from
	// (Join sets them). They are not part of the served bundle.
	Spans []Span
}

// Join concatenates sources in order, one newline between them, and merges
// the data file maps in order: a later map wins for a name present in two.
func Join(sources []Source, data ...map[string][]byte) Bundle {
	var b strings.Builder
	spans := make([]Span, 0, len(sources))
	line := 1
	for _, s := range sources {
		text := strings.TrimSuffix(s.Rules, "\n")
		n := strings.Count(text, "\n") + 1
		spans = append(spans, Span{Source: s.Name, First: line, Lines: n})
		b.WriteString(text)
		b.WriteByte('\n')
		line += n
	}
	files := map[string][]byte{}
	for _, m := range data {
		maps.Copy(files, m)
	}
	if len(files) == 0 {
		files = nil
	}
	return Bundle{Rules: b.String(), DataFiles: files, Spans: spans}
}

// Locate maps a bundle line to its source and the line within that source.
// Without spans, or for a line outside them, it returns "" and the line.
func (b Bundle) Locate(line int) (source string, sourceLine int) {
	for _, s := range b.Spans {
		if line >= s.First && line < s.First+s.Lines {
			return s.Source, line - s.First + 1
		}
	}
	return "", line
}

// SHA256 is the hex SHA-256 digest of the bundle's canonical encoding: the
// rules, then each data file in name order, each string preceded by its
// length as an 8-byte big-endian integer. Spans are not part of it.
func (b Bundle) SHA256() string {
	h := sha256.New()
	writeField(h, b.Rules)
	for _, name := range slices.Sorted(maps.Keys(b.DataFiles)) {
		writeField(h, name)
		writeField(h, string(b.DataFiles[name]))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// dataDigest is the hex SHA-256 digest of the data files alone.
func (b Bundle) dataDigest() string {
	h := sha256.New()
	for _, name := range slices.Sorted(maps.Keys(b.DataFiles)) {
		writeField(h, name)
		writeField(h, string(b.DataFiles[name]))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeField(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

// revisionNamespace is the UUID namespace of revision ids.
var revisionNamespace = uuid.MustParse("6f1c0b1e-5b5e-4f2a-9a57-70e7a1c0d3a1")

// RevisionUUID derives a revision id from a bundle digest (SHA256): a
// name-based (version 5) UUID, so every replica that compiles the same bundle
// serves it under the same id.
func RevisionUUID(sha string) string {
	return uuid.NewSHA1(revisionNamespace, []byte(sha)).String()
}

// Size is the bundle's weight in the cache: rules plus file names and
// contents, in bytes.
func (b Bundle) Size() int64 {
	n := int64(len(b.Rules))
	for name, c := range b.DataFiles {
		n += int64(len(name) + len(c))
	}
	return n
}
