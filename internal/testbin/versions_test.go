package testbin_test

import (
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/devcluster"
)

// TestToolsShareModuleVersionsWithPortal: kube-apiserver, kubectl and etcd,
// built from hack/tools, use the version Portal uses of every module they
// share with it (and etcd the version kube-apiserver uses). The Go build
// cache then compiles the ~800 packages they share once: a cold `make run`
// took 411 s with the versions apart and 300 s with them aligned
// (README). One bump of go.mod that leaves hack/tools behind would quietly
// take that back; this test names the `go get` that restores it.
func TestToolsShareModuleVersionsWithPortal(t *testing.T) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	want := moduleVersions(t, root, "./cmd/portal")
	k8s := moduleVersions(t, filepath.Join(root, "hack/tools"), "k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kubectl")
	checkShared(t, "hack/tools (kube-apiserver, kubectl)", "Portal", k8s, want)
	for mod, v := range k8s {
		if _, ok := want[mod]; !ok {
			want[mod] = v
		}
	}
	checkShared(t, "hack/tools/etcd", "Portal and kube-apiserver", moduleVersions(t, filepath.Join(root, "hack/tools/etcd"), "."), want)
}

// checkShared reports each module of got that want has at another version.
func checkShared(t *testing.T, what, other string, got, want map[string]string) {
	t.Helper()
	var fix []string
	for _, mod := range slices.Sorted(maps.Keys(got)) {
		if v, ok := want[mod]; ok && v != got[mod] {
			t.Errorf("%s builds %s %s, %s %s: a cold build compiles every package above it twice", what, mod, got[mod], other, v)
			fix = append(fix, mod+"@"+v)
		}
	}
	if len(fix) > 0 {
		t.Logf("raise the older side; for %s: (cd %s && go get %s && go mod tidy)", what, strings.SplitN(what, " ", 2)[0], strings.Join(fix, " "))
	}
}

// moduleVersions returns the module versions (after replacements) of the
// packages pkgs are built from, in the module at dir.
func moduleVersions(t *testing.T, dir string, pkgs ...string) map[string]string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{with .Module}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}"}, pkgs...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list in %s: %v\n%s", dir, err, stderr)
	}
	versions := map[string]string{}
	for line := range strings.Lines(string(out)) {
		mod, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || v == "" {
			continue // the main module
		}
		if prev, dup := versions[mod]; dup && prev != v {
			panic(fmt.Sprintf("module %s at %s and %s in one build", mod, prev, v))
		}
		versions[mod] = v
	}
	return versions
}
