// Package pm replaces Coraza's @pm and @pmFromFile (alias @pmf) with
// operators that answer the common case, no word in the subject, with one
// pass of internal/waf/wordset's automaton instead of the Aho-Corasick
// library's search (its DFA for @pm, its NFA for @pmFromFile), about 2.5
// times slower per byte. On benign traffic every Core Rule Set @pm rule
// reads its whole subject and finds nothing.
//
// Semantics are Coraza v3.8.1's (internal/operators/pm.go,
// pm_from_file.go): the argument is lower-cased and split on single spaces;
// a data file
// gives one word per line, trimmed, without empty lines and lines starting
// with '#'; ASCII letters match case-insensitively. A capturing rule gets
// the first ten leftmost-longest matches as TX:0..9, from the library's
// automaton, which is built the first time a capturing rule matches. Two
// spaces in a row make an empty word, on which the library's answers depend
// on the order of the words ("0 " does not match "1", " 0" does): such a
// list is left to the library altogether.
package pm

import (
	"bufio"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"

	"github.com/corazawaf/coraza/v3/experimental/plugins"
	"github.com/corazawaf/coraza/v3/experimental/plugins/plugintypes"
	ahocorasick "github.com/petar-dambovaliev/aho-corasick"

	"github.com/vilaca/portal/internal/waf/wordset"
)

func init() {
	plugins.RegisterOperator("pm", New)
	plugins.RegisterOperator("pmFromFile", NewFromFile)
	plugins.RegisterOperator("pmf", NewFromFile)
}

// maxCaptures is how many matches a capturing rule records, as Coraza's pm.
const maxCaptures = 10

// matcher is what the memoizer shares between rules and WAFs with the same
// words.
type matcher struct {
	set    *wordset.Set // nil when a word is empty
	words  []string
	minLen int

	once sync.Once
	ac   ahocorasick.AhoCorasick
}

type operator struct{ m *matcher }

// New is the operator factory Coraza calls for each @pm.
func New(options plugintypes.OperatorOptions) (plugintypes.Operator, error) {
	data := strings.ToLower(options.Arguments)
	m, err := memoizeDo(options.Memoizer, "pm:"+data, func() (any, error) {
		return newMatcher(strings.Split(data, " ")), nil
	})
	if err != nil {
		return nil, err
	}
	return operator{m: m.(*matcher)}, nil
}

// NewFromFile is the operator factory for @pmFromFile and @pmf.
func NewFromFile(options plugintypes.OperatorOptions) (plugintypes.Operator, error) {
	name := options.Arguments
	data, err := loadFromFile(name, options.Path, options.Root)
	if err != nil {
		return nil, err
	}
	m, err := memoizeDo(options.Memoizer, "pm-file:"+strings.Join(options.Path, ",")+name, func() (any, error) {
		return newMatcher(lines(data)), nil
	})
	if err != nil {
		return nil, err
	}
	return operator{m: m.(*matcher)}, nil
}

func newMatcher(words []string) *matcher {
	m := &matcher{words: words}
	for i, w := range words {
		if w == "" {
			m.minLen = 0
			return m
		}
		if i == 0 || len(w) < m.minLen {
			m.minLen = len(w)
		}
	}
	m.set = wordset.New(words)
	return m
}

// lines reads a data file as Coraza's pmFromFile does; bufio.Scanner's
// line limit included, so both read the same words from the same file.
func lines(data []byte) []string {
	var words []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' {
			continue
		}
		words = append(words, strings.ToLower(l))
	}
	return words
}

func (o operator) Evaluate(tx plugintypes.TransactionState, value string) bool {
	m := o.m
	if len(value) < m.minLen || m.set != nil && !m.set.Contains(value) {
		return false
	}
	if !tx.Capturing() && m.set != nil {
		return true
	}
	iter := m.automaton().Iter(value)
	if !tx.Capturing() {
		return iter.Next() != nil
	}
	n := 0
	for ; n < maxCaptures; n++ {
		match := iter.Next()
		if match == nil {
			break
		}
		tx.CaptureField(n, value[match.Start():match.End()])
	}
	return n > 0
}

// automaton returns the library's automaton for the match positions a
// capturing rule records. It is built the first time a capturing rule
// matches, so rule sets that never match (most @pmFromFile lists, on most
// traffic) do not hold it.
func (m *matcher) automaton() *ahocorasick.AhoCorasick {
	m.once.Do(func() {
		b := ahocorasick.NewAhoCorasickBuilder(ahocorasick.Opts{
			AsciiCaseInsensitive: true,
			MatchKind:            ahocorasick.LeftMostLongestMatch,
		})
		m.ac = b.Build(m.words)
	})
	return &m.ac
}

var errEmptyDirs = errors.New("empty dirs")

// loadFromFile finds a data file as Coraza's operators do: an absolute path
// in root, otherwise the first of dirs that holds it.
func loadFromFile(name string, dirs []string, root fs.FS) ([]byte, error) {
	if path.IsAbs(name) {
		return fs.ReadFile(root, name)
	}
	if len(dirs) == 0 {
		return nil, errEmptyDirs
	}
	var err error
	for _, dir := range dirs {
		var data []byte
		data, err = fs.ReadFile(root, path.Join(dir, name))
		if err == nil {
			return data, nil
		}
		if !os.IsNotExist(err) {
			return nil, err
		}
	}
	return nil, err
}

func memoizeDo(m plugintypes.Memoizer, key string, fn func() (any, error)) (any, error) {
	if m != nil {
		return m.Do(key, fn)
	}
	return fn()
}
