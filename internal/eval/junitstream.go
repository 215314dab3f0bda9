package eval

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/vilaca/portal/internal/junit"
)

// A JUnit report groups the results by rule, one test suite each, in the
// order the rules first gave a result, with counts in each suite's start
// tag: nothing can be written before the run ends. junitStore keeps the
// test cases, encoded by the workers, in blocks of one rule's cases
// (in a spill file when the run has one), and the blocks' places per rule,
// so memory holds a few bytes per block, not the results.

// junitBlockSize is how many bytes of one rule's cases the report gathers
// before it writes them as a block: memory holds up to twice this per rule,
// and the index grows by 16 bytes a block (a million pods' report against
// 19 rules: 3.4 GB of cases, 3.4 MB of index).
const junitBlockSize = 16 << 10

type junitStore struct {
	// spill holds the blocks; nil keeps them in mem.
	spill *spill
	mem   []byte
	rules []*junitRule
	index map[string]int
	tests int
	err   error
}

// junitRule is one test suite: its counts, its blocks, and the cases not
// yet written as a block.
type junitRule struct {
	name                    string
	tests, failures, errors int
	blocks                  []junitBlock
	pending                 []byte
}

type junitBlock struct{ off, n int64 }

// junitCases are a batch's test cases, encoded, per rule in the order the
// batch met the rules.
type junitCases struct {
	rules []*junitRule
	index map[string]int
}

// encodeJUnit encodes results as test cases, as writeJUnit would: written
// directly where appendJUnitCase can, else by encoding/xml (whose
// reflection was a quarter of a one-job run's CPU with -o junit).
func encodeJUnit(results []Result) (*junitCases, error) {
	jc := &junitCases{index: map[string]int{}}
	var buf bytes.Buffer
	enc := xml.NewEncoder(&buf)
	enc.Indent("    ", "  ")
	for i := range results {
		res := &results[i]
		ri, ok := jc.index[res.Rule]
		if !ok {
			ri = len(jc.rules)
			jc.index[res.Rule] = ri
			jc.rules = append(jc.rules, &junitRule{name: res.Rule})
		}
		r := jc.rules[ri]
		r.tests++
		switch res.Result {
		case "fail":
			r.failures++
		case "error":
			r.errors++
		}
		if r.pending, ok = appendJUnitCase(r.pending, res); ok {
			continue
		}
		tc := junitCaseOf(res)
		buf.Reset()
		if err := enc.EncodeElement(tc, xml.StartElement{Name: xml.Name{Local: "testcase"}}); err != nil {
			return nil, err
		}
		// Each case is on a line of its own, as in the whole document.
		r.pending = append(append(r.pending, '\n'), bytes.TrimLeft(buf.Bytes(), "\n")...)
	}
	return jc, nil
}

// add appends a batch's cases, after those already added.
func (s *junitStore) add(jc *junitCases) {
	if s.index == nil {
		s.index = map[string]int{}
	}
	for _, c := range jc.rules {
		ri, ok := s.index[c.name]
		if !ok {
			ri = len(s.rules)
			s.index[c.name] = ri
			s.rules = append(s.rules, &junitRule{name: c.name})
		}
		r := s.rules[ri]
		r.tests += c.tests
		r.failures += c.failures
		r.errors += c.errors
		s.tests += c.tests
		r.pending = append(r.pending, c.pending...)
		if len(r.pending) >= junitBlockSize {
			s.flush(r)
		}
	}
}

// flush writes r's pending cases as a block.
func (s *junitStore) flush(r *junitRule) {
	if len(r.pending) == 0 {
		return
	}
	if s.spill == nil {
		r.blocks = append(r.blocks, junitBlock{off: int64(len(s.mem)), n: int64(len(r.pending))})
		s.mem = append(s.mem, r.pending...)
	} else {
		r.blocks = append(r.blocks, junitBlock{off: s.spill.n, n: int64(len(r.pending))})
		s.spill.write(r.pending)
	}
	r.pending = r.pending[:0]
}

// merge appends another store's cases, as if its run came after.
func (s *junitStore) merge(o *junitStore) {
	if o.err != nil {
		s.err = o.err
	}
	rd, err := o.reader()
	if err != nil {
		s.err = err
		return
	}
	for _, r := range o.rules {
		jc := &junitCases{rules: []*junitRule{{name: r.name, tests: r.tests, failures: r.failures, errors: r.errors}}}
		for _, b := range r.blocks {
			buf := make([]byte, b.n)
			if _, err := rd.ReadAt(buf, b.off); err != nil {
				s.err = err
				return
			}
			jc.rules[0].pending = append(jc.rules[0].pending, buf...)
		}
		jc.rules[0].pending = append(jc.rules[0].pending, r.pending...)
		s.add(jc)
	}
}

func (s *junitStore) reader() (io.ReaderAt, error) {
	if s.spill == nil {
		return bytes.NewReader(s.mem), nil
	}
	return s.spill.contents(0)
}

// write writes the report: the same bytes writeJUnit writes for the
// results.
func (s *junitStore) write(w io.Writer, sum Summary) error {
	if s.err != nil {
		return s.err
	}
	for _, r := range s.rules {
		s.flush(r)
	}
	rd, err := s.reader()
	if err != nil {
		return err
	}
	// To a regular file (a report redirected to one), a spill's section
	// copies itself in the kernel rather than through this process; to
	// anything else (a pipe) that would cost each block seeks and a failed
	// copy_file_range before the same copy.
	kernel := s.spill != nil && isRegular(w)
	block := func(b junitBlock) (io.Reader, error) {
		if kernel {
			return s.spill.section(b.off, b.n)
		}
		return io.NewSectionReader(rd, b.off, b.n), nil
	}
	buf := []byte(xml.Header)
	buf = fmt.Appendf(buf, `<testsuites tests="%d" failures="%d" errors="%d">`, s.tests, sum.Fail, sum.Error)
	for _, r := range s.rules {
		buf = append(buf, "\n  <testsuite name=\""...)
		buf = appendXMLAttr(buf, r.name)
		buf = append(buf, `" tests="`...)
		buf = strconv.AppendInt(buf, int64(r.tests), 10)
		buf = fmt.Appendf(buf, `" failures="%d" errors="%d">`, r.failures, r.errors)
		for _, b := range r.blocks {
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
			src, err := block(b)
			if err != nil {
				return err
			}
			if _, err := io.Copy(w, src); err != nil {
				return err
			}
		}
		buf = append(buf, "\n  </testsuite>"...)
	}
	if len(s.rules) > 0 {
		buf = append(buf, '\n')
	}
	buf = append(buf, "</testsuites>\n"...)
	_, err = w.Write(buf)
	return err
}

// isRegular reports whether w is a regular file.
func isRegular(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode().IsRegular()
}

// appendXMLAttr appends s escaped as encoding/xml escapes text: by
// appendXMLEscaped where s is printable ASCII, else by xml.EscapeText.
func appendXMLAttr(buf []byte, s string) []byte {
	if out, ok := appendXMLEscaped(buf, s); ok {
		return out
	}
	// buf's own length is as it was: what the fast path wrote before it
	// gave up is overwritten.
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return append(buf, b.Bytes()...)
}

// junitCaseOf is the test case of one result.
func junitCaseOf(res *Result) junit.Case {
	name := res.resourceName()
	if res.Container != "" {
		name += " container " + res.Container
	}
	tc := junit.Case{Name: name, ClassName: res.Rule}
	problem := &junit.Problem{Message: res.Message, Type: res.EnforcementAction + "/" + res.Severity, Text: res.Message}
	switch res.Result {
	case "fail":
		tc.Failure = problem
	case "error":
		tc.Error = problem
	case "skip":
		tc.Skipped = &junit.Skipped{Message: res.Message}
	}
	return tc
}

// appendJUnitCase appends res's test case on a line of its own, in the
// bytes encoding/xml writes for junitCaseOf(res) at the report's indent,
// or returns buf unchanged and false when a string holds a byte other than
// printable ASCII, tab, newline or carriage return (encoding/xml decodes
// those as UTF-8 and replaces what XML cannot hold).
func appendJUnitCase(buf []byte, res *Result) ([]byte, bool) {
	start := len(buf)
	ok := true
	esc := func(s string) {
		var fine bool
		buf, fine = appendXMLEscaped(buf, s)
		ok = ok && fine
	}
	buf = append(buf, "\n    <testcase name=\""...)
	esc(res.Resource.Kind)
	buf = append(buf, '/')
	if res.Resource.Namespace != "" {
		esc(res.Resource.Namespace)
		buf = append(buf, '/')
	}
	esc(res.Resource.Name)
	if res.Container != "" {
		buf = append(buf, " container "...)
		esc(res.Container)
	}
	buf = append(buf, "\" classname=\""...)
	esc(res.Rule)
	buf = append(buf, "\">"...)
	var elem string
	switch res.Result {
	case "fail":
		elem = "failure"
	case "error":
		elem = "error"
	case "skip":
		buf = append(buf, "\n      <skipped message=\""...)
		esc(res.Message)
		buf = append(buf, "\"></skipped>\n    "...)
	}
	if elem != "" {
		buf = append(append(append(buf, "\n      <"...), elem...), " message=\""...)
		esc(res.Message)
		buf = append(buf, "\" type=\""...)
		esc(res.EnforcementAction)
		buf = append(buf, '/')
		esc(res.Severity)
		buf = append(buf, "\">"...)
		esc(res.Message)
		buf = append(append(append(buf, "</"...), elem...), ">\n    "...)
	}
	buf = append(buf, "</testcase>"...)
	if !ok {
		return buf[:start], false
	}
	return buf, true
}

// appendXMLEscaped appends s as encoding/xml escapes an attribute value or
// character data, and false for a byte outside printable ASCII, tab,
// newline and carriage return.
func appendXMLEscaped(buf []byte, s string) ([]byte, bool) {
	last := 0
	for i := 0; i < len(s); i++ {
		var esc string
		switch c := s[i]; c {
		case '"':
			esc = "&#34;"
		case '\'':
			esc = "&#39;"
		case '&':
			esc = "&amp;"
		case '<':
			esc = "&lt;"
		case '>':
			esc = "&gt;"
		case '\t':
			esc = "&#x9;"
		case '\n':
			esc = "&#xA;"
		case '\r':
			esc = "&#xD;"
		default:
			if c < 0x20 || c > 0x7e {
				return buf, false
			}
			continue
		}
		buf = append(append(buf, s[last:i]...), esc...)
		last = i + 1
	}
	return append(buf, s[last:]...), true
}
