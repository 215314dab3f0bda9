package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
)

// MaxDocument bounds one document of StreamItems (a List item, a JSON
// value, a YAML document): the reader holds one at a time, so this, not
// the size of the input, bounds its memory.
const MaxDocument = 256 << 20

// errDocTooLarge: one document past MaxDocument fails the read.
var errDocTooLarge = fmt.Errorf("a document is larger than %d MiB", MaxDocument>>20)

// StreamItems is Stream for evaluation: besides cutting YAML streams at
// "---", it yields each item of a List (a JSON object with an "items"
// array, or a block YAML mapping whose "items:" is a block sequence, as
// kubectl get -o json|yaml writes them) as a document of its own, as soon
// as the item is read, and reads JSON objects one after another (JSON
// lines, jq output) as documents of their own, which Stream refuses.
// Where Stream's documents read without error, the objects of those it
// yields are the same, in the same order, or an error where a List cannot
// be cut as the parser reads it (FuzzStreamItems); where Stream's fail,
// so do these. A List of a million objects is thus read and evaluated a
// batch of items at a time instead of as one document. Standard input is
// read without Stream's overall limit; each document is bounded by
// MaxDocument.
func StreamItems(paths []string, stdin io.Reader) iter.Seq2[Document, error] {
	return streamPaths(paths, stdin, splitItems, noLimit)
}

// noLimit: standard input is not bounded as a whole.
const noLimit = 1<<63 - 1

// docKind says how Objects treats a document StreamItems cut from a List.
type docKind uint8

const (
	// wholeDoc is a document as written: a List in it is expanded.
	wholeDoc docKind = iota
	// listItem is one item of a List: it must be an object with
	// apiVersion and kind, and is never expanded itself.
	listItem
	// listEnvelope is a List without its items, which were yielded
	// before it: it is checked as the List was, and holds no object.
	listEnvelope
)

// itemSplitter cuts a stream as StreamItems does.
type itemSplitter struct {
	br    *bufio.Reader
	path  string
	line  int // the line of the next byte read
	yield func(Document) bool
	stop  bool // yield asked to stop
	// max bounds one document: MaxDocument.
	max int
	// scratch is readLine's buffer, reused: lines are copied out of it.
	scratch []byte
	// hint sizes a document's or List item's buffer: a little more than
	// the last one, as documents of one stream are alike, so the buffer
	// rarely grows (each growth copies it).
	hint int
	// json is set once a JSON object was read: the input is then JSON
	// (objects one after another), as the whole-document parser reads it,
	// so neither a YAML comment nor a YAML document may follow.
	json bool
}

// maxHint bounds hint, so one huge item does not make every buffer after
// it huge.
const maxHint = 1 << 20

// sized takes b, a document or item just read, as the size of the next
// buffer, and returns it in a buffer of its own size when its buffer, sized
// by the hint, is much larger: a small document after a big one would
// otherwise hold the big one's memory until it is decoded, and a stream of
// both would hold twice its size in flight.
func (s *itemSplitter) sized(b []byte) []byte {
	s.hint = min(len(b)+len(b)/8, maxHint)
	return fit(b)
}

func fit(b []byte) []byte {
	if cap(b) > 2*len(b)+4096 {
		return bytes.Clone(b)
	}
	return b
}

func splitItems(path string, r io.Reader, yield func(Document) bool) (bool, error) {
	return splitItemsMax(path, r, yield, MaxDocument)
}

func splitItemsMax(path string, r io.Reader, yield func(Document) bool, maxDoc int) (bool, error) {
	s := &itemSplitter{br: bufio.NewReaderSize(&crLines{r: r}, streamBuffer), path: path, line: 1, yield: yield, max: maxDoc}
	for !s.stop {
		c, prefix, err := s.skipBlank()
		if errors.Is(err, io.EOF) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		switch {
		case c == '{':
			s.json = true
			err = s.jsonObject()
		case s.json:
			err = s.syntax("invalid character %q after top-level value", c)
		default:
			err = s.yamlDoc(prefix)
		}
		if err != nil {
			return false, err
		}
	}
	return false, nil
}

func (s *itemSplitter) emit(d Document) {
	if !s.stop && !s.yield(d) {
		s.stop = true
	}
}

// skipBlank reads the blank and comment lines before a document, and the
// white space before its first byte, which it returns unread with that
// white space (the first line's indentation, which YAML needs).
func (s *itemSplitter) skipBlank() (byte, []byte, error) {
	var prefix []byte
	for {
		c, err := s.br.ReadByte()
		if err != nil {
			return 0, nil, err
		}
		switch c {
		case ' ', '\t', '\r', '\v', '\f':
			prefix = append(prefix, c)
		case '\n':
			s.line++
			prefix = prefix[:0]
		case '#':
			if s.json {
				return 0, nil, s.syntax("invalid character '#' after top-level value")
			}
			if _, err := s.readLine(nil); err != nil && !errors.Is(err, io.EOF) {
				return 0, nil, err
			}
			prefix = prefix[:0]
		default:
			return c, prefix, s.br.UnreadByte()
		}
	}
}

// readLine appends the rest of the line, without its end, to buf, and
// counts it. It returns io.EOF with the last line of an input that does
// not end in a newline (which may be empty).
func (s *itemSplitter) readLine(buf []byte) ([]byte, error) {
	start := len(buf)
	for {
		text, err := s.br.ReadSlice('\n')
		buf = append(buf, text...)
		if len(buf)-start > s.max {
			return nil, errDocTooLarge
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil:
			return bytes.TrimRight(buf, "\r"), err
		}
		s.line++
		return bytes.TrimRight(buf[:len(buf)-1], "\r"), nil
	}
}

// yamlDoc reads a YAML document up to its "---" or the end of the input,
// splitting a top-level "items:" block sequence into its items.
func (s *itemSplitter) yamlDoc(prefix []byte) error {
	start := s.line
	// Sized like the last document: documents of one stream are alike, and
	// growing the buffer line by line allocated twice the document.
	cur := make([]byte, 0, s.hint)
	split := false
	for !s.stop {
		if prefix == nil {
			cur = s.plainLines(cur)
		}
		lineNo := s.line
		text, err := s.readLine(append(s.scratch[:0], prefix...))
		s.scratch, prefix = text[:0], nil
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		eof := err != nil
		if eof && len(text) == 0 {
			break
		}
		if bytes.HasPrefix(text, []byte("---")) && separator.Match(text) {
			break
		}
		if string(bytes.TrimRight(text, " ")) == "items:" {
			if split {
				// A second items: the parser refuses the duplicate key.
				s.emit(Document{Path: s.path, Line: lineNo, err: errors.New(`mapping key "items" already defined`)})
			}
			n, next, nextEOF, err := s.yamlItems()
			if err != nil {
				return err
			}
			if n == 0 {
				// Not a block sequence: the key stays in the document (text
				// was read into the buffer yamlItems reused).
				cur = append(cur, "items:\n"...)
			}
			split = split || n > 0
			if next == nil && nextEOF {
				break
			}
			text, eof = next, nextEOF
			if bytes.HasPrefix(text, []byte("---")) && separator.Match(text) {
				break
			}
		}
		if len(cur)+len(text) > s.max {
			return errDocTooLarge
		}
		cur = append(append(cur, text...), '\n')
		if eof {
			break
		}
	}
	kind := wholeDoc
	if split {
		kind = listEnvelope
	}
	if split {
		cur = fit(cur) // the envelope: items size the next buffer
	} else {
		cur = s.sized(cur)
	}
	if split || !blank(cur) {
		s.emit(Document{Path: s.path, Line: start, Data: cur, kind: kind})
	}
	return nil
}

// plainLines appends to cur, in one copy, the whole lines read ahead that
// yamlDoc would only append one by one: up to the first line that starts
// with '-' or 'i' (a separator, a top-level "items:"), ends in a CRLF
// (whose CR readLine trims; crLines leaves a CR nowhere else) or would
// take the document past its bound. Each line is looked at once: what
// stops the walk is where the next walk starts, after readLine has taken
// that line, so no input makes the reader go over the same bytes again
// (from a review: checking for a CR after the walk, and taking nothing
// when one was there, walked the rest of the buffer again for every line
// of a CRLF file). Lines copied in bulk instead of a line at a time make
// the reader, which every job waits on, about twice as fast on block YAML
// (BenchmarkStreamItems).
func (s *itemSplitter) plainLines(cur []byte) []byte {
	buf, _ := s.br.Peek(s.br.Buffered())
	n, lines := 0, 0
	for n < len(buf) && buf[n] != '-' && buf[n] != 'i' {
		i := bytes.IndexByte(buf[n:], '\n')
		if i < 0 || (i > 0 && buf[n+i-1] == '\r') || len(cur)+n+i+1 > s.max {
			break
		}
		n += i + 1
		lines++
	}
	if n == 0 {
		return cur
	}
	cur = append(cur, buf[:n]...)
	_, _ = s.br.Discard(n)
	s.line += lines
	return cur
}

// yamlItems reads the block sequence after a top-level "items:" and
// yields each entry as a document, its text moved left to column 0. It
// returns how many it yielded and the first line after the sequence
// (nil at the end of the input, with eof).
func (s *itemSplitter) yamlItems() (n int, next []byte, eof bool, err error) {
	var (
		item      []byte
		itemLine  int
		seqIndent = -1
		strip     = -1 // the column of the entry's content; -1 until known
		bad       error
	)
	flush := func() {
		if itemLine == 0 {
			return
		}
		d := Document{Path: s.path, Line: itemLine, Data: s.sized(item), kind: listItem, err: bad}
		s.emit(d)
		n++
		item, itemLine, strip, bad = make([]byte, 0, s.hint), 0, -1, nil
	}
	var pending [][]byte // blank lines before the first entry
	for !s.stop {
		lineNo := s.line
		text, rerr := s.readLine(s.scratch[:0])
		s.scratch = text[:0]
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return n, nil, false, rerr
		}
		eof = rerr != nil
		indent := leadingSpaces(text)
		isBlank := blankLine(text)
		switch {
		case isBlank && (eof && len(text) == 0):
			// The end of the input.
		case isBlank:
			if itemLine != 0 {
				item = append(item, stripped(text, strip)...)
				item = append(item, '\n')
			} else if seqIndent < 0 {
				pending = append(pending, text)
			}
		case (seqIndent < 0 || indent == seqIndent) && isSeqItem(text[indent:]):
			flush()
			seqIndent, itemLine = indent, lineNo
			content := bytes.TrimLeft(text[indent+1:], " ")
			if len(content) > 0 {
				strip = len(text) - len(content)
			}
			item = append(append(item, content...), '\n')
		case seqIndent >= 0 && indent > seqIndent:
			if strip < 0 {
				strip = indent
			}
			if indent < strip {
				bad = cmpOr(bad, errors.New("a List item's lines are less indented than its first: cannot be read as an item"))
			}
			item = append(append(item, stripped(text, strip)...), '\n')
		default:
			if seqIndent >= 0 && indent > 0 {
				// Neither the next top-level key nor an entry: the parser
				// refuses what follows a sequence at this indentation, so
				// the last item is not read as if the List ended well.
				bad = cmpOr(bad, errors.New("a line after the List's items is indented, but less than them or not as an item: cannot be read as a List"))
			}
			flush()
			if seqIndent < 0 && len(pending) > 0 {
				// Nothing was split: the blank lines go back (they only
				// matter to line numbers).
				for range pending {
					next = append(next, '\n')
				}
			}
			return n, append(next, text...), eof, nil
		}
		if len(item) > s.max {
			return n, nil, false, errDocTooLarge
		}
		if eof {
			break
		}
	}
	flush()
	return n, nil, true, nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func leadingSpaces(t []byte) int {
	i := 0
	for i < len(t) && t[i] == ' ' {
		i++
	}
	return i
}

// stripped is t without its first strip columns, or empty when fewer are
// spaces (a blank or comment line: it matters only to line numbers).
func stripped(t []byte, strip int) []byte {
	if strip < 0 || leadingSpaces(t) < strip {
		return nil
	}
	return t[strip:]
}
