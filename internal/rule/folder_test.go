package rule_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

const folderRule = `name: no-privileged
match:
  gvk: [{group: "", kind: Pod}]
rule: container.securityContext.privileged == true
`

const brokenRule = `
---
name: broken
match:
  gvk: [{group: "", kind: Pod}]
rule: container.securityContext.privileged ==
`

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestFolderHotReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yaml")
	write(t, file, folderRule)

	eng := engine.New(exprlang.New())
	logs := &syncWriter{}
	metrics := rule.NewMetrics(nil)
	loader := rule.NewFolder(dir, eng, rule.NewIndex(eng), slog.New(slog.NewJSONHandler(logs, nil)), metrics)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loader.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	<-loader.Loaded()
	if got := verdict(t, eng, privilegedPod("default"), "no-privileged"); got != core.OutcomeFail {
		t.Fatalf("initial load: verdict %q, want fail", got)
	}

	// A broken rule in the same file is reported with file, line and column; the
	// good one keeps loading.
	write(t, file, folderRule+brokenRule)
	eventually(t, "load error counted", func() bool {
		return testutil.ToFloat64(metrics.LoadErrors.WithLabelValues("folder")) == 1
	})
	logged := logs.String()
	if !strings.Contains(logged, `"line":10,"column":45`) || !strings.Contains(logged, file) {
		t.Errorf("error log does not name the file and the line and column of the expression error (10:45):\n%s", logged)
	}
	if got := verdict(t, eng, privilegedPod("default"), "no-privileged"); got != core.OutcomeFail {
		t.Fatalf("good rule lost after a sibling broke: verdict %q", got)
	}

	// New files in new directories are picked up.
	sub := filepath.Join(dir, "team")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(sub, "latest.yaml"), strings.ReplaceAll(strings.ReplaceAll(folderRule, "no-privileged", "no-latest"),
		"container.securityContext.privileged == true", `container.image.tag == "latest"`))
	eventually(t, "rule in new directory loaded", func() bool {
		return verdict(t, eng, privilegedPod("default"), "no-latest") != ""
	})

	// Deleting removes the rules without a restart.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	eventually(t, "rules of deleted file removed", func() bool {
		return verdict(t, eng, privilegedPod("default"), "no-privileged") == ""
	})
	if err := os.RemoveAll(sub); err != nil {
		t.Fatal(err)
	}
	eventually(t, "rules of deleted directory removed", func() bool { return len(eng.Rules()) == 0 })
}

func startFolder(t *testing.T, dir string) (*engine.Engine, *rule.Metrics) {
	t.Helper()
	eng := engine.New(exprlang.New())
	metrics := rule.NewMetrics(nil)
	loader := rule.NewFolder(dir, eng, rule.NewIndex(eng), slog.New(slog.NewTextHandler(io.Discard, nil)), metrics)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loader.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	<-loader.Loaded()
	return eng, metrics
}

// A ConfigMap volume exposes each key as a symlink through ..data, which the
// kubelet swaps atomically to a new hidden directory on every update.
func TestFolderFollowsConfigMapUpdates(t *testing.T) {
	dir := t.TempDir()
	writeVersion := func(version, rules string) {
		t.Helper()
		vdir := filepath.Join(dir, version)
		if err := os.Mkdir(vdir, 0o700); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(vdir, "rules.yaml"), rules)
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(version, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	writeVersion("..v1", folderRule)
	if err := os.Symlink(filepath.Join("..data", "rules.yaml"), filepath.Join(dir, "rules.yaml")); err != nil {
		t.Fatal(err)
	}
	eng, metrics := startFolder(t, dir)
	if n := len(eng.Rules()); n != 1 {
		t.Fatalf("%d rules after first load, want 1 (hidden directories must not load twice)", n)
	}

	writeVersion("..v2", strings.ReplaceAll(folderRule, "no-privileged", "no-privileged-v2"))
	eventually(t, "updated ConfigMap applied", func() bool {
		rules := eng.Rules()
		return len(rules) == 1 && rules[0].Name == "no-privileged-v2"
	})

	// Fixtures kept next to rules are not rules.
	if err := os.MkdirAll(filepath.Join(dir, "testdata"), 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "testdata", "pod.yaml"), "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n")
	write(t, filepath.Join(dir, "trigger.yaml"), strings.ReplaceAll(folderRule, "no-privileged", "trigger"))
	eventually(t, "rescan after new file", func() bool { return len(eng.Rules()) == 2 })
	if n := testutil.ToFloat64(metrics.LoadErrors.WithLabelValues("folder")); n != 0 {
		t.Fatalf("%v load errors: a testdata fixture was read as a rule", n)
	}
}

func TestFolderKeepsPreviousVersionOfABrokenFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yaml")
	write(t, file, folderRule)
	eng, metrics := startFolder(t, dir)
	write(t, file, strings.ReplaceAll(folderRule, "privileged == true", "privileged == "))
	eventually(t, "error counted", func() bool { return testutil.ToFloat64(metrics.LoadErrors.WithLabelValues("folder")) == 1 })
	if got := verdict(t, eng, privilegedPod("default"), "no-privileged"); got != core.OutcomeFail {
		t.Fatalf("broken edit switched the rule off: verdict %q", got)
	}
}
