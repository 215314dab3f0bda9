// Package transform registers faster versions of the Coraza
// transformations the Core Rule Set spends its time in. Each one answers
// the common case, an input the transformation leaves as it is, with a
// scan that the CPU does many bytes at a time, and hands every other input
// to Coraza's own function, so the results are Coraza's (FuzzTransform
// compares the two on every input).
//
// Coraza caches a transformed value per argument and chain prefix, but an
// argument still goes through each distinct prefix of every rule: on a
// 10 KB form the transformations were a fifth of the request, most of it
// byte-by-byte scans (and rune-by-rune ones, in x/net/html and strings.Map)
// that found nothing to change.
package transform

import (
	"fmt"
	"strings"
	_ "unsafe" // go:linkname

	"github.com/corazawaf/coraza/v3/experimental/plugins"
	"github.com/corazawaf/coraza/v3/experimental/plugins/plugintypes"

	"github.com/vilaca/portal/internal/waf/ascii"
)

// corazaTransformation is Coraza's registry lookup. It is read before
// this package registers its own versions, so it returns Coraza's
// functions; go.mod pins the Coraza version it is checked against.
//
//go:linkname corazaTransformation github.com/corazawaf/coraza/v3/internal/transformations.GetTransformation
func corazaTransformation(name string) (plugintypes.Transformation, error)

// fastPaths maps a transformation to the test that an input comes out of
// it unchanged.
var fastPaths = map[string]func(string) bool{
	"urlDecode":          noByte2('%', '+'),
	"urlDecodeUni":       noByte2('%', '+'),
	"utf8toUnicode":      ascii.Is,
	"htmlEntityDecode":   noByte('&'),
	"replaceComments":    func(s string) bool { return !strings.Contains(s, "/*") },
	"compressWhitespace": compressed,
	"normalisePath":      cleanPath,
	"normalizePath":      cleanPath,
	"normalisePathWin":   cleanWinPath,
	"normalizePathWin":   cleanWinPath,
}

// originals holds Coraza's functions by name, for tests and fallbacks.
var originals = map[string]plugintypes.Transformation{}

func init() {
	for name, unchanged := range fastPaths {
		orig := original(name)
		originals[name] = orig
		plugins.RegisterTransformation(name, func(s string) (string, bool, error) {
			if unchanged(s) {
				return s, false, nil
			}
			return orig(s)
		})
	}
	orig := original("removeWhitespace")
	originals["removeWhitespace"] = orig
	plugins.RegisterTransformation("removeWhitespace", func(s string) (string, bool, error) {
		if ascii.Is(s) {
			return removeASCIISpace(s)
		}
		return orig(s)
	})
}

func original(name string) plugintypes.Transformation {
	t, err := corazaTransformation(name)
	if err != nil {
		panic(fmt.Sprintf("transform: Coraza has no transformation %q: %v", name, err))
	}
	return t
}

func noByte(b byte) func(string) bool {
	return func(s string) bool { return strings.IndexByte(s, b) < 0 }
}

func noByte2(a, b byte) func(string) bool {
	return func(s string) bool { return strings.IndexByte(s, a) < 0 && strings.IndexByte(s, b) < 0 }
}

// asciiSpace is unicode.IsSpace on ASCII.
var asciiSpace = [256]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// compressed reports an ASCII input without a run of two spaces and
// without a space other than ' ', which compressWhitespace leaves as it is.
func compressed(s string) bool {
	if !ascii.Is(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if asciiSpace[s[i]] && (s[i] != ' ' || i+1 < len(s) && asciiSpace[s[i+1]]) {
			return false
		}
	}
	return true
}

// cleanPath reports a non-empty input without '/' or '.', which
// filepath.Clean returns as it is.
func cleanPath(s string) bool {
	return s != "" && strings.IndexByte(s, '/') < 0 && strings.IndexByte(s, '.') < 0
}

// cleanWinPath reports an input normalisePathWin leaves as it is: a clean
// path without backslashes, a colon (a drive or a stream) or a trailing
// space.
func cleanWinPath(s string) bool {
	return cleanPath(s) && strings.IndexByte(s, '\\') < 0 && strings.IndexByte(s, ':') < 0 && s[len(s)-1] != ' '
}

// removeASCIISpace is removeWhitespace on ASCII input: strings.Map with
// unicode.IsSpace, a rune at a time, did the same.
func removeASCIISpace(s string) (string, bool, error) {
	i := 0
	for i < len(s) && !asciiSpace[s[i]] {
		i++
	}
	if i == len(s) {
		return s, false, nil
	}
	b := make([]byte, i, len(s))
	copy(b, s[:i])
	for ; i < len(s); i++ {
		if !asciiSpace[s[i]] {
			b = append(b, s[i])
		}
	}
	return string(b), true, nil
}
