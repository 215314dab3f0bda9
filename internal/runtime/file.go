package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/vilaca/portal/internal/context/event"
)

// Defaults of FileOptions.
const (
	DefaultPollInterval = 250 * time.Millisecond
	// MaxLineBytes bounds one line of the audit log: a longer one is
	// skipped and counted.
	MaxLineBytes = 1 << 20
)

// FileOptions configure the audit log file input.
type FileOptions struct {
	// Path is the audit log the API server writes (--audit-log-path),
	// JSON lines, rotated by renaming (--audit-log-maxsize).
	Path string
	// StateFile records how far Path was evaluated, so a restart resumes
	// there: after the last event evaluated with every one before it, so
	// events read but not yet evaluated when Portal stops are read again.
	// Written atomically as evaluation moves on.
	StateFile string
	// PollInterval is how often the file is checked for new lines.
	PollInterval time.Duration
	Logger       *slog.Logger
}

// fileState is what StateFile holds: the file and the offset of the first
// byte not yet evaluated.
type fileState struct {
	fileID
	Offset int64 `json:"offset"`
	// Rotated is the stamp of the newest rotated file Portal had listed
	// when it reached this position (never later: the position can be
	// saved long after, while evaluation catches up). A rotated file
	// stamped later rotated since; stamps compared with stamps, no clock.
	Rotated time.Time `json:"rotated,omitzero"`
	// Skipping is set while the offset is inside a line over MaxLineBytes:
	// what follows, up to its newline, is the rest of that line.
	Skipping bool `json:"skipping,omitempty"`
}

// FileInput follows an audit log: new lines as they are written, across
// rotations, resuming after a restart at the offset it recorded. It waits
// for room in the queue rather than drop: nobody waits on a file.
type FileInput struct {
	o   FileOptions
	src *Source
	m   *Metrics
	// skipping: the bytes read are the rest of a line over MaxLineBytes,
	// dropped up to its newline (Start's goroutine only).
	skipping bool
	// prog is how far the events read were evaluated: what StateFile
	// records (set by Start).
	prog *progress
	// openFile and readDir are os.Open and os.ReadDir; tests make them
	// fail.
	openFile func(name string) (*os.File, error)
	readDir  func(name string) ([]os.DirEntry, error)
	// newest is the stamp of the newest rotated file listed, given to
	// the positions reached from then on (Start's goroutine only).
	newest time.Time
}

// NewFileInput returns the input feeding src.
func NewFileInput(o FileOptions, src *Source, m *Metrics) *FileInput {
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &FileInput{o: o, src: src, m: m, openFile: os.Open, readDir: os.ReadDir}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica reads its own node's log (run it as a DaemonSet on the control
// plane nodes with leader election off; see docs/concepts/runtime.md).
func (*FileInput) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable: it follows the file until ctx ends.
func (f *FileInput) Start(ctx context.Context) error {
	st, err := f.loadState()
	for said := ""; err != nil; st, err = f.loadState() {
		// Not "no state": the log would be read from its start, and the
		// state overwritten. Wait for it, saying why once per cause.
		if err.Error() != said {
			said = err.Error()
			f.o.Logger.Warn("audit log state unreadable; trying again at every poll", "stateFile", f.o.StateFile, "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(f.o.PollInterval):
		}
	}
	// Twice the queue: reading runs that far ahead of the slowest
	// evaluation at most.
	f.prog = newProgress(st, 2*cap(f.src.audit), f.saveState)
	var (
		file *os.File
		rest []byte
	)
	defer func() {
		if file != nil {
			file.Close()
		}
		// What is evaluated from now on, the workers record.
		f.prog.stop()
	}()
	t := time.NewTicker(f.o.PollInterval)
	defer t.Stop()
	// said is the error last logged: one that lasts (the log not there
	// yet, a read that keeps failing) is logged when it starts and when it
	// changes, not at every poll.
	said := ""
	for {
		var err error
		file, rest, st, err = f.step(ctx, file, rest, st)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil && err.Error() != said:
			said = err.Error()
			f.o.Logger.Warn("audit log: trying again at every poll", "path", f.o.Path, "error", err)
		case err == nil && said != "":
			said = ""
			f.o.Logger.Info("audit log: reading again", "path", f.o.Path)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// step reads what is new: from the open file, then, when Path names
// another file now (rotation), the rest of the old one and the new one
// from its start.
func (f *FileInput) step(ctx context.Context, file *os.File, rest []byte, st fileState) (*os.File, []byte, fileState, error) {
	if file == nil {
		var err error
		if file, st, err = f.open(st); err != nil {
			return nil, nil, st, err
		}
		rest, f.skipping = nil, st.Skipping
	} else if ok, err := st.matches(file); err == nil && !ok {
		// Truncated and written again past the offset since the last
		// poll: the size below cannot tell, the start can. Checked before
		// reading on, which would read from the middle of a line.
		st, err = f.fromStart(file, st)
		if err != nil {
			return file, nil, st, err
		}
		rest = nil
	}
	// A read error that does not pass (EIO, say) is waited out while the
	// file is the log, the only one to read; once the log has rotated
	// past it, the rest of the file is given up, or the reader would stay
	// on it for ever.
	lasting := func(err error) bool { return err != nil && ctx.Err() == nil && !passing(err) }
	rest, st, readErr := f.drain(ctx, file, rest, st)
	if readErr != nil && !lasting(readErr) {
		return file, rest, st, readErr
	}
	fi, err := os.Stat(f.o.Path)
	if err != nil {
		return file, rest, st, readErr // rotated away, the new one not there yet
	}
	if inode(fi) == st.Inode {
		if readErr == nil && fi.Size() < st.Offset { // truncated in place
			st, err = f.fromStart(file, st)
			return file, nil, st, err
		}
		return file, rest, st, readErr
	}
	// Rotated: the old file is complete; read what it still holds, then
	// move to the next from its start: the next rotated file when the log
	// rotated more than once since this one was written (while Portal was
	// down, or between two polls), else the new log.
	// Read once more even after an error: one that passed is recovered
	// from; only a second failure gives the file up.
	rest, st, readErr = f.drain(ctx, file, rest, st)
	if readErr != nil && !lasting(readErr) {
		return file, rest, st, readErr
	}
	var modified time.Time
	if cur, err := file.Stat(); err == nil {
		modified = cur.ModTime()
	}
	next := inode(fi)
	bs, err := f.backups()
	if passing(err) {
		// Which file comes next is not known: keep this one, try again.
		return file, rest, st, err
	}
	if b, ok := nextBackup(bs, st.Inode, modified); ok {
		next = b.inode
	}
	if readErr != nil {
		f.o.Logger.Warn("audit log: cannot read on in a rotated file; the rest of its events are skipped",
			"path", file.Name(), "inode", st.Inode, "offset", st.Offset, "error", readErr)
	}
	file.Close()
	st, f.skipping = fileState{fileID: fileID{Inode: next}, Rotated: f.newest}, false
	f.prog.reached(st)
	f.prog.record()
	return nil, nil, st, nil
}

// fromStart reads file again from its start: truncated in place (and
// maybe written again).
func (f *FileInput) fromStart(file *os.File, st fileState) (fileState, error) {
	st = fileState{fileID: fileID{Inode: st.Inode}, Rotated: st.Rotated}
	f.skipping = false
	f.prog.reset(st)
	_, err := file.Seek(0, io.SeekStart)
	return st, err
}

// recordEvery is how much of the log drain reads between two records of
// the state when it reaches no end (a log written faster than it is
// evaluated): what a crash makes the next start read again.
const recordEvery = 1 << 20

// drain reads the complete lines after the offset and queues their
// events, then records how far they were evaluated; a partial last line
// waits in rest.
func (f *FileInput) drain(ctx context.Context, file *os.File, rest []byte, st fileState) ([]byte, fileState, error) {
	buf := make([]byte, 64<<10)
	unrecorded := 0
	for {
		n, err := file.Read(buf)
		if n > 0 {
			if st.HeadLen < headBytes {
				st.fileID = st.withHead(file)
			}
			rest = append(rest, buf[:n]...)
			var consumed int
			rest, consumed = f.lines(ctx, rest, st)
			st.Offset += int64(consumed)
			st.Skipping = f.skipping
			f.prog.reached(st)
			// A log written faster than it is evaluated has no end to
			// reach: record on the way too, each recordEvery bytes.
			if unrecorded += n; unrecorded >= recordEvery {
				f.prog.record()
				unrecorded = 0
			}
		}
		// A read error is not the end: the caller decides (a rotated
		// file given up, the log waited for).
		if errors.Is(err, io.EOF) || (n == 0 && err == nil) {
			f.prog.record()
			return rest, st, nil
		}
		if err != nil {
			// Saved as far as it was read, as at an end: the error can
			// last, and a crash meanwhile would read it all again.
			f.prog.record()
			return rest, st, err
		}
		if ctx.Err() != nil {
			// Stopping before the end of the file (Start records).
			return rest, st, ctx.Err()
		}
	}
}

// lines queues the events of the complete lines of data, which begins at
// st, and returns what follows the last newline, and how many bytes were
// consumed.
func (f *FileInput) lines(ctx context.Context, data []byte, st fileState) ([]byte, int) {
	consumed := 0
	if f.skipping {
		// The rest of an over-long line, already counted: dropped up to
		// its newline, never read as a line of its own.
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return nil, len(data)
		}
		consumed, f.skipping = i+1, false
	}
	for {
		i := bytes.IndexByte(data[consumed:], '\n')
		if i < 0 {
			break
		}
		line := data[consumed : consumed+i]
		consumed += i + 1
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var (
			ev  event.Event
			err error
		)
		if len(line) > MaxLineBytes {
			// A read can bring a line over the bound with its newline.
			err = errors.New("line too long")
		} else {
			ev, err = event.DecodeLine(line)
		}
		if err != nil {
			f.m.Received.WithLabelValues(InputFile).Inc()
			f.m.Dropped.WithLabelValues(InputFile, DropDecode).Inc()
			continue
		}
		p := f.prog
		seq, err := p.next(ctx)
		if err == nil {
			if err = f.src.Queue(ctx, InputFile, ev, func() { p.evaluated(seq) }); err != nil {
				p.unqueue(seq)
			}
		}
		if err != nil {
			// Stopping: this line was not queued, so the offset stays
			// before it and the next start reads it.
			start := consumed - i - 1
			return append([]byte(nil), data[start:]...), start
		}
		// Once this event and every one before it are evaluated, a
		// restart resumes after its line.
		f.prog.reached(fileState{fileID: st.fileID, Offset: st.Offset + int64(consumed), Rotated: st.Rotated})
	}
	rest := data[consumed:]
	if len(rest) > MaxLineBytes {
		// No newline within the bound: the line is dropped, counted once,
		// and what follows up to its newline is skipped.
		f.m.Received.WithLabelValues(InputFile).Inc()
		f.m.Dropped.WithLabelValues(InputFile, DropDecode).Inc()
		f.skipping = true
		return nil, len(data)
	}
	return append([]byte(nil), rest...), consumed
}

// loadState reads the state file: the zero state when there is none (the
// log never read), an error when it cannot be read (try again).
func (f *FileInput) loadState() (fileState, error) {
	var st fileState
	if f.o.StateFile == "" {
		return st, nil
	}
	data, err := os.ReadFile(f.o.StateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		f.o.Logger.Warn("audit log state unreadable: reading the log from its start", "stateFile", f.o.StateFile, "error", err)
		return fileState{}, nil
	}
	f.newest = st.Rotated
	return st, nil
}

func (f *FileInput) saveState(st fileState) {
	if f.o.StateFile == "" {
		return
	}
	data, _ := json.Marshal(st)
	tmp := f.o.StateFile + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		f.o.Logger.Warn("audit log state not saved", "stateFile", f.o.StateFile, "error", err)
		return
	}
	if err := os.Rename(tmp, f.o.StateFile); err != nil {
		f.o.Logger.Warn("audit log state not saved", "stateFile", f.o.StateFile, "error", fmt.Errorf("rename: %w", err))
	}
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
