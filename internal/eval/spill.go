package eval

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
)

// spill holds a JSON report's encoded results in a temporary file, written
// in input order as the run decides them, so that memory does not grow
// with the number of results: a report is often many times its input (one
// element per rule and object). Nothing reaches the report's writer until
// the run ends, so a run that fails still writes no partial report.
type spill struct {
	f *os.File
	w *bufio.Writer
	// n counts the bytes written; err is the first write error, reported
	// when the report is written.
	n   int64
	err error
	// unlinked: the file was removed from its directory at once (POSIX),
	// so a killed run leaves nothing behind; else close removes it.
	unlinked bool
}

// spillBuffer is the write buffer of a spill: large enough that a batch's
// results cost one write.
const spillBuffer = 256 << 10

func newSpill(dir string) (*spill, error) {
	f, err := os.CreateTemp(dir, "portal-eval-*.json")
	if err != nil {
		return nil, err
	}
	// Removing an open file works on POSIX systems and keeps it readable
	// through f; where it does not (Windows), close removes it.
	unlinked := os.Remove(f.Name()) == nil
	return &spill{f: f, w: bufio.NewWriterSize(f, spillBuffer), unlinked: unlinked}, nil
}

func (s *spill) write(b []byte) {
	if s.err != nil || len(b) == 0 {
		return
	}
	n, err := s.w.Write(b)
	s.n += int64(n)
	s.err = err
}

// readFrom appends what r reads, as write does.
func (s *spill) readFrom(r io.Reader) {
	if s.err != nil {
		return
	}
	n, err := io.Copy(s.w, r)
	s.n += n
	s.err = err
}

// contents flushes the spill and returns what it holds from offset off.
func (s *spill) contents(off int64) (*spillReader, error) {
	if s.err == nil {
		s.err = s.w.Flush()
	}
	if s.err != nil {
		return nil, fmt.Errorf("write the report's results to a temporary file: %w", s.err)
	}
	return &spillReader{SectionReader: io.NewSectionReader(s.f, off, max(s.n-off, 0)), f: s.f, off: off}, nil
}

// spillReader reads a spill from an offset. Copied to a file (a report
// redirected to one, as in CI), the bytes go file to file in the kernel
// (copy_file_range) instead of through this process 32 KB at a time: the
// copy is the one part of a run no job count shortens, and a JSON report is
// several times the input (536 MB for 100,000 pods).
type spillReader struct {
	*io.SectionReader
	f   *os.File
	off int64
}

func (r *spillReader) WriteTo(w io.Writer) (int64, error) {
	dst, ok := w.(*os.File)
	if !ok {
		return io.Copy(w, struct{ io.Reader }{r.SectionReader})
	}
	read, err := r.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	// The spill is written at the file's offset: put it back after.
	end, err := r.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	if _, err := r.f.Seek(r.off+read, io.SeekStart); err != nil {
		return 0, err
	}
	n, err := io.Copy(dst, &io.LimitedReader{R: r.f, N: r.Size() - read})
	if _, serr := r.f.Seek(end, io.SeekStart); err == nil {
		err = serr
	}
	if _, serr := r.Seek(n, io.SeekCurrent); err == nil {
		err = serr
	}
	return n, err
}

func (s *spill) close() error {
	err := s.f.Close()
	if !s.unlinked {
		err = errors.Join(err, os.Remove(s.f.Name()))
	}
	return err
}
