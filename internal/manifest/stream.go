package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"slices"
)

// Stream reads the documents under paths as ReadPaths does, in the same
// order, but one at a time: a document is yielded as soon as its end is
// read, and nothing is kept after, so a consumer that lets documents go
// holds a bounded part of the input whatever its size. A read error is
// yielded once, with a zero Document, and ends the stream.
func Stream(paths []string, stdin io.Reader) iter.Seq2[Document, error] {
	return streamPaths(paths, stdin, splitStream, MaxStdin)
}

// splitFunc cuts what r reads from path into documents; it reports false
// when yield asked to stop.
type splitFunc func(path string, r io.Reader, yield func(Document) bool) (bool, error)

// streamPaths reads paths as Stream does, cutting each input with split,
// and reads at most stdinCap bytes of standard input.
func streamPaths(paths []string, stdin io.Reader, split splitFunc, stdinCap int64) iter.Seq2[Document, error] {
	return func(yield func(Document, error) bool) {
		docs := func(d Document) bool { return yield(d, nil) }
		seen := FileSet{}
		for _, p := range paths {
			if p == "-" {
				in := &cappedReader{r: stdin, left: stdinCap}
				more, err := split("<stdin>", in, docs)
				if err != nil {
					yield(Document{}, fmt.Errorf("read stdin: %w", err))
					return
				}
				if !more {
					return
				}
				continue
			}
			files, err := Files(p)
			if err != nil {
				yield(Document{}, err)
				return
			}
			for _, f := range files {
				if !seen.First(f) {
					continue
				}
				more, err := streamFile(f, split, docs)
				if err != nil {
					yield(Document{}, fmt.Errorf("read %s: %w%s", f, err, fileTemplateHint(f)))
					return
				}
				if !more {
					return
				}
			}
		}
	}
}

func streamFile(path string, split splitFunc, yield func(Document) bool) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	return split(path, f, yield)
}

// errTooLarge: standard input is read up to MaxStdin, so a runaway pipe
// fails instead of running for ever.
var errTooLarge = fmt.Errorf("more than %d MiB", MaxStdin>>20)

// cappedReader reads r until left bytes were read, then fails.
type cappedReader struct {
	r    io.Reader
	left int64
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// One byte more tells a stream of exactly the limit from a longer
		// one.
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			return 0, errTooLarge
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// streamBuffer is the read buffer of splitStream; longer lines are
// gathered across reads.
const streamBuffer = 64 << 10

// splitStream is Split reading r: it yields each document as its end is
// read. It reports false when yield asked to stop.
func splitStream(path string, r io.Reader, yield func(Document) bool) (bool, error) {
	br := bufio.NewReaderSize(r, streamBuffer)
	start, line := 1, 1
	var cur bytes.Buffer
	flush := func() bool {
		defer cur.Reset()
		if blank(cur.Bytes()) {
			return true
		}
		return yield(Document{Path: path, Line: start, Data: slices.Clone(cur.Bytes())})
	}
	var long []byte
	for {
		text, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, text...)
			continue
		}
		if long != nil {
			text, long = append(long, text...), nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return false, err
		}
		if len(text) > 0 {
			text = bytes.TrimRight(text, "\r\n")
			switch {
			case bytes.HasPrefix(text, []byte("---")) && separator.Match(text):
				if !flush() {
					return false, nil
				}
				start = line + 1
			case cur.Len() == 0 && blankLine(text):
				start = line + 1
			default:
				cur.Write(text)
				cur.WriteByte('\n')
			}
			line++
		}
		if err != nil {
			return flush(), nil
		}
	}
}

// fileTemplateHint is templateHint for a file that failed to read, from its
// first 4 KiB: a template's actions come early.
func fileTemplateHint(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 4096)
	n, _ := io.ReadFull(f, head)
	return templateHint(head[:n])
}
