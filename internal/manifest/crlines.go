package manifest

import (
	"bytes"
	"io"
)

// crLines passes a reader's bytes on with each carriage return that does not
// start a CRLF turned into a line feed. YAML reads a lone CR as a line break
// (so does JSON, as white space), but the item splitter cuts lines at line
// feeds only: without this, an item whose line holds a lone CR was indented
// differently when cut than the parser sees it whole. A CRLF stays as it is
// (readLine trims its CR).
type crLines struct {
	r io.Reader
	// held: the last chunk ended in a CR, kept back until the next byte
	// says whether a LF follows it.
	held bool
}

func (c *crLines) Read(p []byte) (int, error) {
	if len(p) < 2 {
		// Room for a held CR and one byte after it; bufio never asks for less.
		return 0, io.ErrShortBuffer
	}
	start := 0
	if c.held {
		p[0], start, c.held = '\r', 1, false
	}
	n, err := c.r.Read(p[start:])
	n += start
	for i := 0; i < n; {
		j := bytes.IndexByte(p[i:n], '\r')
		if j < 0 {
			break
		}
		i += j
		switch {
		case i+1 < n:
			if p[i+1] != '\n' {
				p[i] = '\n'
			}
		case err == nil:
			c.held = true
			n--
		default:
			p[i] = '\n'
		}
		i++
	}
	return n, err
}
