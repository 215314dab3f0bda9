package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// store persists last good bundles under a directory so they survive a
// controller restart. A Secret or ConfigMap cannot hold them: the API server
// caps an object at about 1 MiB and bundles are often larger (the CRS with
// data files is several MB). Mount a volume at --bundle-cache-dir: an
// emptyDir survives container restarts, a PersistentVolumeClaim survives the
// Pod too.
//
// Layout: blobs/<sha256> holds a bundle document exactly as fetched
// (content-addressed, so consumers of one bundle share one file);
// keys/<sha256 of the consumer key> names the blob a consumer last had. Files
// are written to a temporary name and renamed, so a crash never leaves a torn
// file under its real name, and every blob is verified against its name when
// read back. Blobs total at most max bytes.
type store struct {
	dir string
	max int64
	m   *Metrics

	mu   sync.Mutex
	used int64
}

// record is a consumer's last good bundle.
type record struct {
	Key      string `json:"key"`
	Location string `json:"location"`
	SHA256   string `json:"sha256"`
}

func openStore(dir string, max int64, m *Metrics) (*store, error) {
	s := &store{dir: dir, max: max, m: m}
	for _, d := range []string{s.blobDir(), s.keyDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("bundle cache directory: %w", err)
		}
	}
	entries, err := os.ReadDir(s.blobDir())
	if err != nil {
		return nil, fmt.Errorf("bundle cache directory: %w", err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !e.Type().IsRegular() {
			continue
		}
		if !ValidSHA256(e.Name()) {
			// A temporary file of a write cut short by a crash.
			_ = os.Remove(filepath.Join(s.blobDir(), e.Name()))
			continue
		}
		s.used += info.Size()
	}
	s.removeOrphans()
	m.StoredBytes.Set(float64(s.used))
	return s, nil
}

func (s *store) blobDir() string { return filepath.Join(s.dir, "blobs") }
func (s *store) keyDir() string  { return filepath.Join(s.dir, "keys") }

func (s *store) keyPath(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(s.keyDir(), hex.EncodeToString(sum[:]))
}

// errFull: a blob does not fit in the byte budget.
var errFull = errors.New("over --bundle-cache-max-bytes")

// saveBlob persists data under its digest. When the budget is exceeded,
// blobs no consumer names are removed first (a blob stays until then, so
// records that an earlier run wrote and this one has not read yet never
// lose theirs).
func (s *store) saveBlob(sha string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	path := filepath.Join(s.blobDir(), sha)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if s.used+int64(len(data)) > s.max {
		s.removeOrphans()
		if s.used+int64(len(data)) > s.max {
			return fmt.Errorf("persist bundle %s (%d bytes, %d in use): %w", sha, len(data), s.used, errFull)
		}
	}
	if err := writeAtomic(s.blobDir(), sha, data); err != nil {
		return err
	}
	s.used += int64(len(data))
	s.m.StoredBytes.Set(float64(s.used))
	return nil
}

// loadBlob reads the blob of sha and checks it still hashes to sha; a
// damaged blob is removed.
func (s *store) loadBlob(sha string, limit int64) ([]byte, bool) {
	if !ValidSHA256(sha) {
		return nil, false
	}
	f, err := os.Open(filepath.Join(s.blobDir(), sha))
	if err != nil {
		return nil, false
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil || int64(len(data)) > limit || digest(data) != sha {
		s.removeBlob(sha)
		return nil, false
	}
	return data, true
}

func (s *store) removeBlob(sha string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeBlobLocked(sha)
}

func (s *store) removeBlobLocked(sha string) {
	path := filepath.Join(s.blobDir(), sha)
	info, err := os.Stat(path)
	if err != nil {
		return
	}
	if os.Remove(path) == nil {
		s.used -= info.Size()
		s.m.StoredBytes.Set(float64(s.used))
	}
}

// removeOrphans removes blobs that no key record names; the caller holds mu.
func (s *store) removeOrphans() {
	named := map[string]bool{}
	keys, _ := os.ReadDir(s.keyDir())
	for _, k := range keys {
		if r, ok := s.readRecord(filepath.Join(s.keyDir(), k.Name())); ok {
			named[r.SHA256] = true
		}
	}
	blobs, _ := os.ReadDir(s.blobDir())
	for _, b := range blobs {
		if ValidSHA256(b.Name()) && !named[b.Name()] {
			s.removeBlobLocked(b.Name())
		}
	}
}

func (s *store) saveRecord(r record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	path := s.keyPath(r.Key)
	return writeAtomic(filepath.Dir(path), filepath.Base(path), data)
}

// loadRecord returns the record of key, if one was persisted.
func (s *store) loadRecord(key string) (record, bool) {
	r, ok := s.readRecord(s.keyPath(key))
	if !ok || r.Key != key {
		return record{}, false
	}
	return r, true
}

// maxRecord bounds a key record read back from disk.
const maxRecord = 8 << 10

func (s *store) readRecord(path string) (record, bool) {
	f, err := os.Open(path)
	if err != nil {
		return record{}, false
	}
	defer f.Close()
	var r record
	if err := json.NewDecoder(io.LimitReader(f, maxRecord)).Decode(&r); err != nil || !ValidSHA256(r.SHA256) {
		return record{}, false
	}
	return r, true
}

func (s *store) deleteRecord(key string) { _ = os.Remove(s.keyPath(key)) }

// records returns every readable record on disk.
func (s *store) records() []record {
	keys, _ := os.ReadDir(s.keyDir())
	var out []record
	for _, k := range keys {
		if r, ok := s.readRecord(filepath.Join(s.keyDir(), k.Name())); ok && r.Key != "" {
			out = append(out, r)
		}
	}
	return out
}

// writeAtomic writes dir/name through a temporary file and a rename.
func writeAtomic(dir, name string, data []byte) (err error) {
	tmp, err := os.CreateTemp(dir, "."+strings.TrimPrefix(name, ".")+".tmp-*")
	if err != nil {
		return fmt.Errorf("persist %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("persist %s: %w", name, err)
	}
	if err = os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("persist %s: %w", name, err)
	}
	return nil
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
