package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// backupTime is how the API server's log rotation (lumberjack) stamps a
// rotated file: audit.log becomes audit-2026-01-02T03-04-05.000.log. The
// stamps order the rotated files; a rotation that names them otherwise
// (audit.log.1) is still followed by inode, one rotation at a time.
const backupTime = "2006-01-02T15-04-05.000"

// backup is a rotated file of the audit log.
type backup struct {
	path  string
	inode uint64
	at    time.Time
}

// backups lists path's rotated files, oldest first: regular files beside it
// named as the API server's rotation names them. Compressed ones (.gz, from
// --audit-log-compress) are not listed: they cannot be followed. An error
// is the directory's: none is listed.
func backups(readDir func(string) ([]os.DirEntry, error), path string) ([]backup, error) {
	dir, base := filepath.Split(path)
	ext := filepath.Ext(base)
	prefix := strings.TrimSuffix(base, ext) + "-"
	entries, err := readDir(filepath.Clean(dir))
	if err != nil {
		return nil, fmt.Errorf("list the rotated files of %s: %w", path, err)
	}
	var out []backup
	for _, e := range entries {
		name := e.Name()
		stamp, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		if stamp, ok = strings.CutSuffix(stamp, ext); !ok {
			continue
		}
		at, err := time.Parse(backupTime, stamp)
		if err != nil {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		out = append(out, backup{path: p, inode: inode(fi), at: at})
	}
	slices.SortFunc(out, func(a, b backup) int { return a.at.Compare(b.at) })
	return out, nil
}

// nextBackup is the rotated file of bs (listed by backups) that follows
// the one with inode ino, last modified at modified, when there is one: the
// log rotated again after that file was renamed, and the later file holds
// what came between. When ino's file is no longer listed (deleted by the
// rotation while it was read), the next is the oldest one rotated after its
// last write.
func nextBackup(bs []backup, ino uint64, modified time.Time) (backup, bool) {
	for i, b := range bs {
		if b.inode == ino {
			if i+1 < len(bs) {
				return bs[i+1], true
			}
			return backup{}, false
		}
	}
	if modified.IsZero() {
		return backup{}, false
	}
	for _, b := range bs {
		if b.at.After(modified) {
			return b, true
		}
	}
	return backup{}, false
}

// backups lists the log's rotated files (see backups) and notes the newest
// stamp, which the positions reached from then on carry.
func (f *FileInput) backups() ([]backup, error) {
	bs, err := backups(f.readDir, f.o.Path)
	if n := len(bs); n > 0 && bs[n-1].at.After(f.newest) {
		f.newest = bs[n-1].at
	}
	return bs, err
}
