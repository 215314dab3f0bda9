package manifest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFilesSkipsRuleTests: a directory of rules or manifests may hold a
// rule test file (portal-test.yaml) beside them; it is neither, so a walk
// leaves it out, while a file named on its own is read.
func TestFilesSkipsRuleTests(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"rule.yaml", TestFileName} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("a: b\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Files(dir)
	if err != nil || len(got) != 1 || filepath.Base(got[0]) != "rule.yaml" {
		t.Errorf("Files(dir) = %v, %v; want only rule.yaml", got, err)
	}
	one := filepath.Join(dir, TestFileName)
	if got, err := Files(one); err != nil || len(got) != 1 {
		t.Errorf("Files(%s) = %v, %v; want the file", one, got, err)
	}
}
