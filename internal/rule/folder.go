package rule

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/manifest"
)

// Folder loads the rule files under a directory and reloads them as they
// change. A file's rules replace the previous ones as a whole; a rule that
// fails to parse or compile is logged with its file and line, counted in
// portal_rule_load_errors_total, and left out while the file's other rules
// load.
type Folder struct {
	dir      string
	compiler Compiler
	index    *Index
	log      *slog.Logger
	metrics  *Metrics
	// settle is how long to wait for more events before reloading, so an
	// editor's write-rename-chmod burst causes one reload.
	settle time.Duration
	loaded chan struct{}
}

// NewFolder returns a loader for dir.
func NewFolder(dir string, c Compiler, index *Index, log *slog.Logger, m *Metrics) *Folder {
	return &Folder{dir: dir, compiler: c, index: index, log: log, metrics: m, settle: 100 * time.Millisecond, loaded: make(chan struct{})}
}

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
	if err := f.watchTree(w, f.dir); err != nil {
		return err
	}
	f.loadTree(f.dir)
	close(f.loaded)

	pending := map[string]bool{}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Has(fsnotify.Create) {
				if info, err := os.Stat(ev.Name); err == nil && info.IsDir() {
					if err := f.watchTree(w, ev.Name); err != nil {
						f.log.Error("cannot watch new rules directory", "dir", ev.Name, "error", err)
					}
				}
			}
			pending[ev.Name] = true
			timer.Reset(f.settle)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			f.log.Error("rules folder watch error", "dir", f.dir, "error", err)
		case <-timer.C:
			for p := range pending {
				f.reload(p)
			}
			clear(pending)
		}
	}
}

func (f *Folder) watchTree(w *fsnotify.Watcher, root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("watch rules folder: %w", err)
		}
		if d.IsDir() {
			if p != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if err := w.Add(p); err != nil {
				return fmt.Errorf("watch %s: %w", p, err)
			}
		}
		return nil
	})
}

func (f *Folder) loadTree(root string) {
	files, err := manifest.Files(root)
	if err != nil {
		f.log.Error("cannot list rules folder", "dir", root, "error", err)
		return
	}
	for _, p := range files {
		f.loadFile(p)
	}
}

// reload brings the index in line with whatever is at p now: a file, a
// directory, or nothing.
func (f *Folder) reload(p string) {
	info, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		prefix := folderKey(p)
		f.index.DeleteFunc(func(k string) bool { return k == prefix || strings.HasPrefix(k, prefix+string(filepath.Separator)) })
		f.log.Info("rules removed", "path", p)
	case err != nil:
		f.log.Error("cannot read rules path", "path", p, "error", err)
	case info.IsDir():
		f.loadTree(p)
	case manifest.IsManifestFile(p):
		f.loadFile(p)
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
	rules, errs := CompileFile(f.compiler, p, data)
	for _, e := range errs {
		attrs := []any{"file", p, "error", e}
		var me *manifest.Error
		if errors.As(e, &me) {
			attrs = append(attrs, "line", me.Line)
		}
		f.log.Error("rule not loaded", attrs...)
		f.metrics.LoadErrors.WithLabelValues("folder").Inc()
	}
	f.index.Set(folderKey(p), rules)
	f.log.Info("rule file loaded", "file", p, "rules", len(rules), "errors", len(errs))
	f.updateGauge()
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
