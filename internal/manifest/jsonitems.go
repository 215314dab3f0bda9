package manifest

import (
	"errors"
	"fmt"
	"io"
)

// jsonSyntax is a JSON stream StreamItems cannot cut into values: the
// read fails, as a document that does not parse fails the run.
type jsonSyntax struct {
	line int
	msg  string
}

func (e *jsonSyntax) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

func (s *itemSplitter) syntax(format string, args ...any) error {
	return &jsonSyntax{line: s.line, msg: fmt.Sprintf(format, args...)}
}

// jsonObject reads a top-level JSON object. When it holds an "items"
// array, each element is yielded as a listItem document as soon as it is
// read, and the other fields as the List's envelope; any other object is
// yielded whole. The values are only cut here, not checked: the decoder
// checks each.
func (s *itemSplitter) jsonObject() error {
	start := s.line
	if _, err := s.br.ReadByte(); err != nil { // the '{'
		return err
	}
	env := []byte{'{'}
	var key []byte
	fields, split := 0, false
	for !s.stop {
		c, err := s.skipSpace()
		if err != nil {
			return s.eofIsSyntax(err)
		}
		if c == '}' && fields == 0 && !split {
			_, _ = s.br.ReadByte()
			break
		}
		if c != '"' {
			return s.syntax("want a string key in an object, found %q", c)
		}
		if key, err = s.jsonString(key[:0]); err != nil {
			return err
		}
		if c, err = s.skipSpace(); err != nil || c != ':' {
			return cmpOr(s.eofIsSyntax(err), s.syntax("want ':' after an object key"))
		}
		_, _ = s.br.ReadByte()
		if c, err = s.skipSpace(); err != nil {
			return s.eofIsSyntax(err)
		}
		if string(key) == `"items"` && c == '[' {
			if split {
				s.emit(Document{Path: s.path, Line: s.line, err: errors.New(`duplicate key "items"`)})
			}
			split = true
			if err := s.jsonItems(); err != nil {
				return err
			}
		} else {
			if fields > 0 {
				env = append(env, ',')
			}
			fields++
			env = append(append(env, key...), ':')
			if env, err = s.jsonValue(env); err != nil {
				return err
			}
		}
		if c, err = s.skipSpace(); err != nil {
			return s.eofIsSyntax(err)
		}
		_, _ = s.br.ReadByte()
		if c == '}' {
			break
		}
		if c != ',' {
			return s.syntax("want ',' or '}' after an object value, found %q", c)
		}
	}
	env = append(env, '}')
	kind := wholeDoc
	if split {
		kind = listEnvelope
	}
	s.emit(Document{Path: s.path, Line: start, Data: env, kind: kind})
	return nil
}

// jsonItems reads the elements of an array, past its '[', yielding each.
func (s *itemSplitter) jsonItems() error {
	_, _ = s.br.ReadByte() // the '['
	for first := true; !s.stop; first = false {
		c, err := s.skipSpace()
		if err != nil {
			return s.eofIsSyntax(err)
		}
		if c == ']' && first {
			_, _ = s.br.ReadByte()
			return nil
		}
		line := s.line
		item, err := s.jsonValue(make([]byte, 0, s.hint))
		if err != nil {
			return err
		}
		s.emit(Document{Path: s.path, Line: line, Data: s.sized(item), kind: listItem})
		if c, err = s.skipSpace(); err != nil {
			return s.eofIsSyntax(err)
		}
		_, _ = s.br.ReadByte()
		if c == ']' {
			return nil
		}
		if c != ',' {
			return s.syntax("want ',' or ']' after an array element, found %q", c)
		}
	}
	return nil
}

func (s *itemSplitter) eofIsSyntax(err error) error {
	if errors.Is(err, io.EOF) {
		return s.syntax("the input ends inside a JSON object")
	}
	return err
}

// skipSpace reads JSON white space and returns the next byte, unread.
func (s *itemSplitter) skipSpace() (byte, error) {
	for {
		c, err := s.br.ReadByte()
		if err != nil {
			return 0, err
		}
		switch c {
		case '\n':
			s.line++
		case ' ', '\t', '\r':
		default:
			return c, s.br.UnreadByte()
		}
	}
}

// jsonString appends the string starting at the next byte, its quotes
// included, to buf.
func (s *itemSplitter) jsonString(buf []byte) ([]byte, error) {
	c, _ := s.br.ReadByte()
	buf = append(buf, c)
	escaped := false
	for {
		c, err := s.br.ReadByte()
		if err != nil {
			return nil, s.eofIsSyntax(err)
		}
		buf = append(buf, c)
		switch {
		case escaped:
			escaped = false
		case c == '\\':
			escaped = true
		case c == '"':
			return buf, nil
		case c == '\n':
			return nil, s.syntax("a newline in a string")
		}
		if len(buf) > s.max {
			return nil, errDocTooLarge
		}
	}
}

// jsonOutside and jsonInString are the bytes jsonValue stops at outside
// and inside a string.
var jsonOutside, jsonInString = byteSet("\"{}[]\n"), byteSet("\"\\\n")

func byteSet(stops string) (set [256]bool) {
	for i := range len(stops) {
		set[stops[i]] = true
	}
	return set
}

// jsonValue appends the value starting at the next byte to buf: an object
// or array up to its closing bracket, a string, or a literal up to the
// next delimiter.
func (s *itemSplitter) jsonValue(buf []byte) ([]byte, error) {
	c, err := s.br.ReadByte()
	if err != nil {
		return nil, s.eofIsSyntax(err)
	}
	if c == '"' {
		_ = s.br.UnreadByte()
		return s.jsonString(buf)
	}
	buf = append(buf, c)
	if c != '{' && c != '[' {
		for {
			c, err := s.br.ReadByte()
			if errors.Is(err, io.EOF) {
				return buf, nil
			}
			if err != nil {
				return nil, err
			}
			switch c {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return buf, s.br.UnreadByte()
			}
			buf = append(buf, c)
			if len(buf) > 64 {
				return nil, s.syntax("a literal longer than 64 bytes")
			}
		}
	}
	// The bytes buffered are scanned in place and copied at once, not read
	// one at a time: this loop sees every byte of a JSON input, so it skips
	// the bytes that change nothing by table (most of an indented List is
	// spaces, names and values) and stops only at those that do.
	depth, inString, escaped := 1, false, false
	for depth > 0 {
		chunk, err := s.br.Peek(max(s.br.Buffered(), 1))
		if len(chunk) == 0 {
			return nil, s.eofIsSyntax(err)
		}
		i := 0
		for i < len(chunk) && depth > 0 {
			if escaped { // the byte after a backslash, whatever it is
				escaped = false
				i++
				continue
			}
			stop := &jsonOutside
			if inString {
				stop = &jsonInString
			}
			for i < len(chunk) && !stop[chunk[i]] {
				i++
			}
			if i == len(chunk) {
				break
			}
			switch c := chunk[i]; {
			case c == '\n':
				if inString {
					return nil, s.syntax("a newline in a string")
				}
				s.line++
			case inString && c == '\\':
				escaped = true
			case c == '"':
				inString = !inString
			case c == '{' || c == '[':
				depth++
			case c == '}' || c == ']':
				depth--
			}
			i++
		}
		buf = append(buf, chunk[:i]...)
		_, _ = s.br.Discard(i)
		if len(buf) > s.max {
			return nil, errDocTooLarge
		}
	}
	return buf, nil
}
