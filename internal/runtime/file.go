package runtime

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
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
	// openFile is os.Open; tests make it fail.
	openFile func(name string) (*os.File, error)
}

// NewFileInput returns the input feeding src.
func NewFileInput(o FileOptions, src *Source, m *Metrics) *FileInput {
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &FileInput{o: o, src: src, m: m, openFile: os.Open}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica reads its own node's log (run it as a DaemonSet on the control
// plane nodes with leader election off; see docs/concepts/runtime.md).
func (*FileInput) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable: it follows the file until ctx ends.
func (f *FileInput) Start(ctx context.Context) error {
	st := f.loadState()
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
	for {
		var err error
		file, rest, st, err = f.step(ctx, file, rest, st)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			f.o.Logger.Warn("audit log", "path", f.o.Path, "error", err)
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
	}
	rest, st, err := f.drain(ctx, file, rest, st)
	if err != nil {
		return file, rest, st, err
	}
	fi, err := os.Stat(f.o.Path)
	if err != nil {
		return file, rest, st, nil // rotated away, the new one not there yet
	}
	if inode(fi) == st.Inode {
		if fi.Size() < st.Offset { // truncated in place
			st = fileState{fileID: fileID{Inode: st.Inode}}
			f.skipping = false
			f.prog.reset(st)
			if _, err := file.Seek(0, io.SeekStart); err != nil {
				return file, nil, st, err
			}
			return file, nil, st, nil
		}
		return file, rest, st, nil
	}
	// Rotated: the old file is complete; read what it still holds, then
	// move to the next from its start: the next rotated file when the log
	// rotated more than once since this one was written (while Portal was
	// down, or between two polls), else the new log.
	if rest, st, err = f.drain(ctx, file, rest, st); err != nil {
		return file, rest, st, err
	}
	var modified time.Time
	if cur, err := file.Stat(); err == nil {
		modified = cur.ModTime()
	}
	file.Close()
	next := inode(fi)
	if b, ok := nextBackup(f.o.Path, st.Inode, modified); ok {
		next = b.inode
	}
	st, f.skipping = fileState{fileID: fileID{Inode: next}}, false
	f.prog.reached(st)
	f.prog.record()
	return nil, nil, st, nil
}

// open opens the file the state names: Path when it is the same file, the
// rotated file holding it when the log rotated while Portal was down, the
// oldest rotated file left when that one is gone too, or Path from its
// start. An error (Path missing, a file that cannot be opened for a
// passing reason) leaves the state as it was, to try again at the next
// poll.
func (f *FileInput) open(st fileState) (*os.File, fileState, error) {
	file, err := f.openFile(f.o.Path)
	if err != nil {
		return nil, st, err
	}
	fi, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, st, err
	}
	same := false
	if st.Inode != 0 && st.Inode == inode(fi) {
		if same, err = st.matches(file); err != nil {
			file.Close()
			return nil, st, err
		}
	}
	switch {
	case same && st.Offset <= fi.Size():
	case same || st.Inode == 0:
		// Truncated in place while Portal was down, or never read.
		st = fileState{fileID: fileID{Inode: inode(fi)}}
	default:
		old, err := f.rotated(st.fileID)
		if err != nil {
			file.Close()
			return nil, st, err
		}
		if old != nil {
			file.Close()
			file = old
			break
		}
		if file, st, err = f.afterLoss(file, fi, st); err != nil {
			return nil, st, err
		}
	}
	if _, err := file.Seek(st.Offset, io.SeekStart); err != nil {
		file.Close()
		return nil, st, err
	}
	return file, st, nil
}

// afterLoss is where reading goes on when the file the state is in is
// gone (deleted, or compressed, by the rotation; or another file now has
// its inode): the rotation prunes the oldest files, so the rotated files
// left are later than it (but for the moment one pruning takes to remove
// several); what it still held is lost. It reads on from the oldest
// rotated file that opens, else from the start of cur (Path, open), and
// says which once it is known.
func (f *FileInput) afterLoss(cur *os.File, fi os.FileInfo, was fileState) (*os.File, fileState, error) {
	file, st, from := cur, fileState{fileID: fileID{Inode: inode(fi)}}, ""
	for _, b := range backups(f.o.Path) {
		old, err := f.openFile(b.path)
		if passing(err) {
			cur.Close()
			return nil, was, fmt.Errorf("open the rotated file %s: %w", b.path, err)
		}
		if err != nil {
			f.o.Logger.Warn("audit log: cannot open a rotated file; its events are skipped", "path", b.path, "error", err)
			continue
		}
		cur.Close()
		file, st, from = old, fileState{fileID: fileID{Inode: b.inode}}, b.path
		break
	}
	attrs := []any{"path", f.o.Path, "stateFile", f.o.StateFile, "inode", was.Inode, "offset", was.Offset}
	if from != "" {
		f.o.Logger.Warn("audit log: the file the recorded offset is in is gone (deleted, or compressed, by the rotation); reading on from the oldest rotated file that opens",
			append(attrs, "from", from)...)
	} else {
		f.o.Logger.Warn("audit log: the file the recorded offset is in is gone (deleted, or compressed, by the rotation); reading the log from its start", attrs...)
	}
	return file, st, nil
}

// passing reports whether an open failed for a reason that passes (the
// process or the system out of file descriptors or memory): the open is
// tried again at the next poll rather than the file's events skipped.
// Anything else (permissions, a file that is not one) would fail every
// time, and waiting for it would stop the log being read at all.
func passing(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOMEM) ||
		errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN)
}

// rotated opens the file beside Path that id names (Path renamed by a
// rotation: the API server's audit-2026-01-02T03-04-05.000.log, or any
// other name a rotation gives it); nil when there is none. An error is a
// passing failure to open or read it (see passing): try again later.
func (f *FileInput) rotated(id fileID) (*os.File, error) {
	dir := filepath.Dir(f.o.Path)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || inode(fi) != id.Inode {
			continue
		}
		file, err := f.openFile(p)
		if passing(err) {
			return nil, fmt.Errorf("open the rotated file %s: %w", p, err)
		}
		if err != nil {
			// Read on as if it were gone, but say so: its events are lost.
			f.o.Logger.Warn("audit log: cannot open the rotated file the recorded offset is in", "path", p, "error", err)
			return nil, nil
		}
		ok, err := id.matches(file)
		if err != nil || !ok {
			file.Close()
			// Another file with the inode of the one deleted.
			return nil, err
		}
		return file, nil
	}
	return nil, nil
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
		if errors.Is(err, io.EOF) || n == 0 {
			f.prog.record()
			return rest, st, nil
		}
		if err != nil {
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
		f.prog.reached(fileState{fileID: st.fileID, Offset: st.Offset + int64(consumed)})
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

func (f *FileInput) loadState() fileState {
	var st fileState
	data, err := os.ReadFile(f.o.StateFile)
	if err != nil {
		return st
	}
	if err := json.Unmarshal(data, &st); err != nil {
		f.o.Logger.Warn("audit log state unreadable: reading the log from its start", "stateFile", f.o.StateFile, "error", err)
		return fileState{}
	}
	return st
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

// headBytes is how much of a file's start identifies it beside its inode.
// An audit log line starts with its event's auditID, so the first line
// alone tells two logs apart.
const headBytes = 1024

// fileID tells the file a state is in from any other. The inode alone
// does not: a file created after the one recorded was deleted can be given
// its inode, and a log truncated and written again (copytruncate) keeps
// it; resuming at the recorded offset in either skipped its first events
// and read half a line. So the state also holds a hash of the file's first
// HeadLen bytes (up to headBytes; fewer while the file was shorter), and a
// file whose start hashes otherwise is another file. A state written
// before the hash was recorded has none and matches by inode alone.
type fileID struct {
	Inode   uint64 `json:"inode"`
	HeadLen int    `json:"headLen,omitempty"`
	Head    string `json:"head,omitempty"`
}

// matches reports whether file is the one id names: its inode (checked by
// the caller) and the hash of its first HeadLen bytes.
func (id fileID) matches(file *os.File) (bool, error) {
	if id.HeadLen == 0 {
		return true, nil
	}
	n, sum, err := head(file, id.HeadLen)
	if err != nil {
		return false, err
	}
	return n == id.HeadLen && sum == id.Head, nil
}

// withHead extends id's hash to the first headBytes of file, or as many as
// it holds: called as the file grows until its start is all hashed. A
// failed read leaves id as it was, to extend at the next.
func (id fileID) withHead(file *os.File) fileID {
	if n, sum, err := head(file, headBytes); err == nil && n > id.HeadLen {
		id.HeadLen, id.Head = n, sum
	}
	return id
}

// head hashes the first max bytes of file (fewer when it is shorter),
// without moving its read offset.
func head(file *os.File, max int) (int, string, error) {
	buf := make([]byte, max)
	n, err := file.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, "", fmt.Errorf("read the start of %s: %w", file.Name(), err)
	}
	sum := sha256.Sum256(buf[:n])
	return n, hex.EncodeToString(sum[:]), nil
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
