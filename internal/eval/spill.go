package eval

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
)

// spill holds a report's encoded results outside memory, written in input
// order as the run decides them, so that memory does not grow with the
// number of results: a report is often many times its input (one element
// per rule and object). In a temporary file, nothing reaches the report's
// writer until the run ends; written in place (into), the destination is
// cut back when the run fails. Either way a run that fails leaves no
// partial report.
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
	// into, for a spill that is the report's destination itself
	// (newInPlace), says how the report is begun and cut back.
	into *inPlace
}

// inPlace is a report written straight into its destination as the run
// decides its results. A JSON report of 100,000 pods is 640 MB; copied from
// a temporary file once the run ends, it was the one part of a whole run no
// number of jobs shortens (0.4 s of 2.0 s on 16 cores).
type inPlace struct {
	// base is the destination's size when the report began: close cuts the
	// file back to it unless the report was finished, so a run that fails
	// leaves what was there before, as a report held back would.
	base int64
	// head is written before the first result: the report's opening, which
	// an empty report writes differently ("results: []").
	head []byte
	// skip counts the bytes still to drop from what the run writes: the
	// first JSON element's comma.
	skip int
	done bool
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

// newInPlace is a spill that writes the report into f itself: f must be a
// regular file written at its end (a shell's "> report.json" gives one).
// head opens the report; skip is the bytes of the first result to drop.
// Else it returns an error, and the run spills to a temporary file.
func newInPlace(f *os.File, head string, skip int) (*spill, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", f.Name())
	}
	off, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, err
	}
	if off != fi.Size() {
		// Appended to (">>" opens with the offset at 0): where the report
		// lands is not known here.
		return nil, fmt.Errorf("%s is written at offset %d of %d bytes", f.Name(), off, fi.Size())
	}
	return &spill{f: f, w: bufio.NewWriterSize(f, spillBuffer), unlinked: true,
		into: &inPlace{base: off, head: []byte(head), skip: skip}}, nil
}

func (s *spill) write(b []byte) {
	if s.into != nil && s.into.skip > 0 {
		d := min(s.into.skip, len(b))
		b, s.into.skip = b[d:], s.into.skip-d
	}
	if s.err != nil || len(b) == 0 {
		return
	}
	if s.into != nil && s.into.head != nil {
		_, s.err = s.w.Write(s.into.head)
		s.into.head = nil
		if s.err != nil {
			return
		}
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
	if s.into != nil {
		_, err := io.Copy(spillWriter{s}, r)
		s.err = cmp.Or(s.err, err)
		return
	}
	n, err := io.Copy(s.w, r)
	s.n += n
	s.err = err
}

// spillWriter is a spill as an io.Writer.
type spillWriter struct{ s *spill }

func (w spillWriter) Write(b []byte) (int, error) {
	w.s.write(b)
	return len(b), w.s.err
}

// finish ends a report written in place into w, which must be its
// destination: tail after the results, or empty (the whole report) when
// there were none.
func (s *spill) finish(w io.Writer, empty, tail []byte) error {
	if f, ok := w.(*os.File); !ok || f != s.f {
		return fmt.Errorf("the report was written into %s as it was evaluated, not to another writer", s.f.Name())
	}
	if s.into.done {
		return fmt.Errorf("the report was already written into %s", s.f.Name())
	}
	if s.err == nil {
		if s.into.head != nil { // no result
			_, s.err = s.w.Write(empty)
		} else {
			_, s.err = s.w.Write(tail)
		}
	}
	if s.err == nil {
		s.err = s.w.Flush()
	}
	if s.err != nil {
		return fmt.Errorf("write the report to %s: %w", s.f.Name(), s.err)
	}
	s.into.done = true
	return nil
}

// contents flushes the spill and returns what it holds from offset off.
func (s *spill) contents(off int64) (*spillReader, error) {
	return s.section(off, max(s.n-off, 0))
}

// section flushes the spill and returns its n bytes from offset off.
func (s *spill) section(off, n int64) (*spillReader, error) {
	if s.into != nil {
		return nil, errors.New("the report is written in place: its results cannot be read back")
	}
	if s.err == nil {
		s.err = s.w.Flush()
	}
	if s.err != nil {
		return nil, fmt.Errorf("write the report's results to a temporary file: %w", s.err)
	}
	return &spillReader{SectionReader: io.NewSectionReader(s.f, off, n), f: s.f, off: off}, nil
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
	if s.into != nil {
		// The destination is not this spill's to close. A report not
		// finished is cut back; what the buffer holds is never written.
		if s.into.done {
			return nil
		}
		s.into.done = true
		err := s.f.Truncate(s.into.base)
		if _, serr := s.f.Seek(s.into.base, io.SeekStart); err == nil {
			err = serr
		}
		return err
	}
	err := s.f.Close()
	if !s.unlinked {
		err = errors.Join(err, os.Remove(s.f.Name()))
	}
	return err
}
