package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

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

// head hashes the first limit bytes of file (fewer when it is shorter),
// without moving its read offset.
func head(file *os.File, limit int) (int, string, error) {
	buf := make([]byte, limit)
	n, err := file.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, "", fmt.Errorf("read the start of %s: %w", file.Name(), err)
	}
	sum := sha256.Sum256(buf[:n])
	return n, hex.EncodeToString(sum[:]), nil
}

// passing reports whether a file or directory could not be opened for a
// reason that passes (the process or the system out of file descriptors
// or memory): the poll is tried again rather than a file's events
// skipped. Anything else (permissions, a read error) would fail every
// time, and waiting for it would stop the log being read at all. (os.Open
// retries EINTR itself.)
func passing(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOMEM)
}

// open opens the file the state names: Path when it is the same file, the
// rotated file holding it when the log rotated while Portal was down, the
// oldest rotated file left when that one is gone too, or Path from its
// start. An error (Path missing, a passing failure) leaves the state as it
// was, to try again at the next poll.
func (f *FileInput) open(st fileState) (*os.File, fileState, error) {
	bs, err := f.backups()
	if passing(err) {
		return nil, st, err
	}
	file, err := f.openFile(f.o.Path)
	if err != nil {
		return nil, st, err
	}
	fi, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, st, err
	}
	seen := st.Rotated
	sameInode := st.Inode != 0 && st.Inode == inode(fi)
	same := false
	if sameInode {
		// The log is all that is left to read: when its start cannot be
		// read, wait rather than guess.
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
	case sameInode && !rotatedSince(bs, seen):
		// The log has the recorded inode but another start, and no file
		// rotated since its position was reached: written again in place
		// (copytruncate), after what was read of it. The rotated files
		// were read before it.
		st = fileState{fileID: fileID{Inode: inode(fi)}}
	default:
		// Rotated away, or gone: deleted by the rotation, its inode maybe
		// given to a later file (the log's own when sameInode).
		var (
			old  *os.File
			skip *backup
		)
		if !sameInode {
			if old, skip, err = f.rotated(st.fileID); err != nil {
				file.Close()
				return nil, st, err
			}
		}
		if old != nil {
			file.Close()
			file = old
			break
		}
		if file, st, err = f.afterLoss(file, fi, st, laterThan(bs, skip)); err != nil {
			return nil, st, err
		}
	}
	if _, err := file.Seek(st.Offset, io.SeekStart); err != nil {
		file.Close()
		return nil, st, err
	}
	st.Rotated = f.newest
	return file, st, nil
}

// rotatedSince reports whether a file of bs is stamped later than seen,
// the newest one listed when the state's position was reached (zero: none
// was).
func rotatedSince(bs []backup, seen time.Time) bool {
	return len(bs) > 0 && bs[len(bs)-1].at.After(seen)
}

// laterThan is the files of bs rotated after skip (all of bs when skip
// is nil): where reading goes on past a rotated file that cannot be read.
// Going back to older files would come round to it again, and again. When
// skip is one of bs, those after it; else (a name the API server's rotation
// does not give) those rotated after its last write.
func laterThan(bs []backup, skip *backup) []backup {
	if skip == nil {
		return bs
	}
	for i, b := range bs {
		if b.path == skip.path {
			return bs[i+1:]
		}
	}
	// Stamps have milliseconds: one in the millisecond of the last write
	// may be later.
	last := skip.at.Truncate(time.Millisecond)
	var out []backup
	for _, b := range bs {
		if !b.at.Before(last) {
			out = append(out, b)
		}
	}
	return out
}

// afterLoss is where reading goes on when the file the state is in is
// gone (deleted, or compressed, by the rotation) or cannot be read: the
// rotation prunes the oldest files, so the rotated files left in bs are
// later than it (but for the moment one pruning takes to remove several);
// what it still held is lost. It reads on from the oldest of bs that
// opens, else from the start of cur (Path, open), and says which once it
// is known. A passing failure to open one keeps the state (cur closed).
func (f *FileInput) afterLoss(cur *os.File, fi os.FileInfo, was fileState, bs []backup) (*os.File, fileState, error) {
	file, st, from := cur, fileState{fileID: fileID{Inode: inode(fi)}}, ""
	for _, b := range bs {
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
		f.o.Logger.Warn("audit log: the file the recorded offset is in is gone or unreadable; reading on from the next rotated file that opens",
			append(attrs, "from", from)...)
	} else {
		f.o.Logger.Warn("audit log: the file the recorded offset is in is gone or unreadable; reading the log from its start", attrs...)
	}
	return file, st, nil
}

// rotated opens the file beside Path that id names (Path renamed by a
// rotation: the API server's audit-2026-01-02T03-04-05.000.log, or any
// other name a rotation gives it); nil when there is none, and then, when
// one has the inode but cannot be opened or read (its events are lost),
// that one (its path, and its last write as at). An error is a passing
// failure (see passing): try again at the next poll.
func (f *FileInput) rotated(id fileID) (*os.File, *backup, error) {
	dir := filepath.Dir(f.o.Path)
	entries, err := f.readDir(dir)
	if err != nil {
		if passing(err) {
			return nil, nil, fmt.Errorf("list %s: %w", dir, err)
		}
		return nil, nil, nil
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || inode(fi) != id.Inode {
			continue
		}
		unreadable := &backup{path: p, inode: id.Inode, at: fi.ModTime()}
		file, err := f.openFile(p)
		if passing(err) {
			return nil, nil, fmt.Errorf("open the rotated file %s: %w", p, err)
		}
		if err != nil {
			f.o.Logger.Warn("audit log: cannot open the rotated file the recorded offset is in; its events are skipped", "path", p, "error", err)
			return nil, unreadable, nil
		}
		ok, err := id.matches(file)
		if ok {
			return file, nil, nil
		}
		file.Close()
		if passing(err) {
			return nil, nil, err
		}
		if err != nil {
			f.o.Logger.Warn("audit log: cannot read the rotated file the recorded offset is in; its events are skipped", "path", p, "error", err)
			return nil, unreadable, nil
		}
		// Another file with the inode of the one deleted.
		return nil, nil, nil
	}
	return nil, nil, nil
}
