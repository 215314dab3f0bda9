package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed cookbook is what the bundle and its fixtures give.
func TestCookbookIsCurrent(t *testing.T) {
	if err := run("../..", true); err != nil {
		t.Error(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A page is written with the messages of the bad fixture; a page left over
// from a removed rule, a page the nav does not list, and an edited rule all
// fail the check.
func TestRunWritesAndChecks(t *testing.T) {
	root := t.TempDir()
	const name = "disallow-latest-tag"
	copyFile(t, filepath.Join("../..", bundleDir, name+".yaml"), filepath.Join(root, bundleDir, name+".yaml"))
	for _, f := range []string{"bad.yaml", "good.yaml", "portal-test.yaml"} {
		copyFile(t, filepath.Join("../..", bundleDir, "testdata", name, f), filepath.Join(root, bundleDir, "testdata", name, f))
	}
	// Every NetworkPolicy check must have its page: bring their fixtures.
	if err := os.CopyFS(filepath.Join(root, networkDir), os.DirFS(filepath.Join("../..", networkDir))); err != nil {
		t.Fatal(err)
	}
	nav := "nav:\n  - cookbook/index.md\n  - cookbook/" + name + ".md\n"
	netDirs, _ := os.ReadDir(filepath.Join(root, networkDir))
	for _, d := range netDirs {
		nav += "  - cookbook/networkpolicy-" + d.Name() + ".md\n"
	}
	if err := os.WriteFile(filepath.Join(root, "mkdocs.yml"), []byte(nav), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(root, false); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, cookbookDir, name+".md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `| Pod shop/web | nginx | fail | container "nginx" uses image nginx`; !strings.Contains(string(page), want) {
		t.Errorf("page lacks %q:\n%s", want, page)
	}
	// The page shows the rule's test file and what portal test prints.
	for _, want := range []string{"## Its test", "rules: [../../disallow-latest-tag.yaml]", "$ portal test --root " + bundleDir + " " + bundleDir + "/testdata/" + name + "\n1 test file, 3 expectations: 3 passed"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	if err := run(root, true); err != nil {
		t.Fatalf("check right after writing: %v", err)
	}
	// A test file that does not pass is no page.
	testPath := filepath.Join(root, bundleDir, "testdata", name, "portal-test.yaml")
	good, _ := os.ReadFile(testPath)
	if err := os.WriteFile(testPath, []byte(strings.Replace(string(good), "result: pass", "result: fail", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(root, true); err == nil || !strings.Contains(err.Error(), "1 expectations do not match") {
		t.Errorf("failing test file: %v, want an error", err)
	}
	if err := os.WriteFile(testPath, good, 0o644); err != nil {
		t.Fatal(err)
	}

	// A generated page whose rule is gone is left over; a hand-written
	// page (no generated header) is a guide the index links.
	if err := os.WriteFile(filepath.Join(root, cookbookDir, "gone.md"), []byte(header+"\n# gone\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(root, true); err == nil || !strings.Contains(err.Error(), "gone.md has no rule") {
		t.Errorf("leftover page: %v, want an error naming gone.md", err)
	}
	os.Remove(filepath.Join(root, cookbookDir, "gone.md"))
	if err := os.WriteFile(filepath.Join(root, cookbookDir, "guide.md"), []byte("# A guide\n\nSteps.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(root, false); err != nil {
		t.Fatal(err)
	}
	if index, _ := os.ReadFile(filepath.Join(root, cookbookDir, "index.md")); !strings.Contains(string(index), "- [A guide](guide.md)") {
		t.Errorf("the index does not link the hand-written guide:\n%s", index)
	}
	os.Remove(filepath.Join(root, cookbookDir, "guide.md"))
	if err := run(root, false); err != nil {
		t.Fatal(err)
	}

	if err := os.WriteFile(filepath.Join(root, "mkdocs.yml"), []byte("nav: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(root, true); err == nil || !strings.Contains(err.Error(), "does not list cookbook/"+name+".md") {
		t.Errorf("page missing from the nav: %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, "mkdocs.yml"), []byte(nav), 0o644); err != nil {
		t.Fatal(err)
	}

	rulePath := filepath.Join(root, bundleDir, name+".yaml")
	src, _ := os.ReadFile(rulePath)
	if err := os.WriteFile(rulePath, []byte(strings.Replace(string(src), "severity: medium", "severity: high", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(root, true); err == nil || !strings.Contains(err.Error(), "out of date") {
		t.Errorf("edited rule: %v, want a stale page", err)
	}
}
