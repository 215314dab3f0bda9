package rule

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/manifest"
)

// Folder loads the rule files under a directory and reloads them as they
// change. Every change triggers a rescan of the whole folder, which is small,
// so renames, editors' temporary files and the symlink swap of a mounted
// ConfigMap all end in the same state as a fresh start. A file applies as a
// whole: when one of its rules fails to parse or compile, the error is logged
// with file and line and counted in portal_rule_load_errors_total, and the
// file's previous version stays active (on the first load, the rules that
// compile load).
type Folder struct {
	dir      string
	compiler Compiler
	index    *Index
	log      *slog.Logger
	metrics  *Metrics
	// settle is how long to wait for more events before rescanning, so an
	// editor's write-rename-chmod burst causes one reload.
	settle time.Duration
	loaded chan struct{}
	// sums holds the content hash of each file as last read, so a rescan
	// only recompiles and logs what changed.
	sums map[string][sha256.Size]byte
}

// NewFolder returns a loader for dir.
func NewFolder(dir string, c Compiler, index *Index, log *slog.Logger, m *Metrics) *Folder {
	return &Folder{
		dir: dir, compiler: c, index: index, log: log, metrics: m,
		settle: 100 * time.Millisecond, loaded: make(chan struct{}), sums: map[string][sha256.Size]byte{},
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every
// replica evaluates, so every replica loads the folder.
func (f *Folder) NeedLeaderElection() bool { return false }

// Loaded is closed once the initial load is done.
func (f *Folder) Loaded() <-chan struct{} { return f.loaded }

func folderKey(path string) string { return "file:" + path }

// Start loads the folder and watches it until ctx ends.
func (f *Folder) Start(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch rules folder %s: %w", f.dir, err)
	}
	defer w.Close()
	// Watch before the first load so no change between the two is missed.
	if err := f.watchTree(w); err != nil {
		return err
	}
	f.rescan()
	close(f.loaded)

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-w.Events:
			if !ok {
				return nil
			}
			timer.Reset(f.settle)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			f.log.Error("rules folder watch error", "dir", f.dir, "error", err)
		case <-timer.C:
			// New directories need watches of their own; adding a watch
			// twice is harmless.
			if err := f.watchTree(w); err != nil {
				f.log.Error("cannot watch rules folder", "dir", f.dir, "error", err)
			}
			f.rescan()
		}
	}
}

// watchTree watches every directory under the folder, hidden ones included:
// a mounted ConfigMap swaps its files through a hidden ..data directory.
func (f *Folder) watchTree(w *fsnotify.Watcher) error {
	return filepath.WalkDir(f.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("watch rules folder: %w", err)
		}
		if d.IsDir() {
			if err := w.Add(p); err != nil {
				return fmt.Errorf("watch %s: %w", p, err)
			}
		}
		return nil
	})
}

// rescan brings the index in line with the folder's files.
func (f *Folder) rescan() {
	files, err := manifest.Files(f.dir)
	if err != nil {
		f.log.Error("cannot list rules folder", "dir", f.dir, "error", err)
		return
	}
	present := map[string]bool{}
	for _, p := range files {
		present[p] = true
		f.loadFile(p)
	}
	for p := range f.sums {
		if !present[p] {
			delete(f.sums, p)
			f.index.Delete(folderKey(p))
			f.log.Info("rule file removed", "file", p)
		}
	}
	f.updateGauge()
}

func (f *Folder) loadFile(p string) {
	data, err := os.ReadFile(p)
	if err != nil {
		f.log.Error("cannot read rule file", "file", p, "error", err)
		f.metrics.LoadErrors.WithLabelValues("folder").Inc()
		return
	}
	sum := sha256.Sum256(data)
	prev, known := f.sums[p]
	if known && prev == sum {
		return
	}
	f.sums[p] = sum
	rules, errs := CompileFile(f.compiler, p, data)
	for _, e := range errs {
		attrs := []any{"file", p, "error", e}
		var me *manifest.Error
		if errors.As(e, &me) {
			attrs = append(attrs, "line", me.Line)
			if me.Column > 0 {
				attrs = append(attrs, "column", me.Column)
			}
		}
		f.log.Error("rule not loaded", attrs...)
		f.metrics.LoadErrors.WithLabelValues("folder").Inc()
	}
	if len(errs) > 0 && known {
		f.log.Error("rule file not applied: its previous version stays active until every rule in it loads", "file", p, "errors", len(errs))
		return
	}
	f.index.Set(folderKey(p), rules)
	f.log.Info("rule file loaded", "file", p, "rules", len(rules), "errors", len(errs))
}

func (f *Folder) updateGauge() {
	n := 0
	for _, r := range f.index.Rules() {
		if r.Source.Kind == "file" {
			n++
		}
	}
	f.metrics.Loaded.WithLabelValues("folder").Set(float64(n))
}

var _ Loader = (*Folder)(nil)
var _ Target = (*engine.Engine)(nil)
