package ruletest_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/vilaca/portal/internal/eval/ruletest"
)

// A test file, its rules and its resources are pull-request input: these
// tests write hostile ones under t.TempDir() and check that each is a
// broken test with a clear error, never a crash, a hang or a leak.

const (
	hostileRule = `name: show-data
severity: low
mode: [admission, audit]
enforcementAction: deny
match:
  gvk:
    - {version: v1, kind: ConfigMap}
rule: true
message: 'data {{ object.data }}'
`
	hostileCM = `apiVersion: v1
kind: ConfigMap
metadata: {name: cm, namespace: demo}
data: {secret: s3cret}
`
	hostileTest = `rules: [%RULES%]
resources: [%RESOURCES%]
results:
- {rule: show-data, resource: ConfigMap/demo/cm, result: pass}
`
)

// write creates the files of a test tree under dir (a value starting with
// "-> " is a symbolic link to the rest, "|fifo" a named pipe).
func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if content == "|fifo" {
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if target, ok := strings.CutPrefix(content, "-> "); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func testFile(rules, resources string) string {
	return strings.NewReplacer("%RULES%", rules, "%RESOURCES%", resources).Replace(hostileTest)
}

// runIn runs dir/portal-test.yaml confined to dir and returns its result
// and its table.
func runIn(t *testing.T, dir string) (ruletest.FileResult, string) {
	t.Helper()
	r := ruletest.Run(context.Background(), filepath.Join(dir, ruletest.FileName), ruletest.Options{Root: dir})
	var b bytes.Buffer
	if err := ruletest.Write(&b, "table", []ruletest.FileResult{r}); err != nil {
		t.Fatal(err)
	}
	return r, b.String()
}

// TestRefusesFilesThatAreNotRegular: a link to /dev/zero as the test file,
// as a resource or inside a rules directory, and a file over the bound,
// are broken tests naming the file, read no further than a stat.
func TestRefusesFilesThatAreNotRegular(t *testing.T) {
	base := map[string]string{"rule.yaml": hostileRule, "cm.yaml": hostileCM}
	for name, tc := range map[string]struct {
		files map[string]string
		big   string
		want  string
	}{
		"test file is /dev/zero":  {files: map[string]string{ruletest.FileName: "-> /dev/zero"}, want: "portal-test.yaml is not a regular file"},
		"resource is /dev/zero":   {files: map[string]string{ruletest.FileName: testFile("rule.yaml", "zero.yaml"), "zero.yaml": "-> /dev/zero"}, want: "resources: " + "%DIR%/zero.yaml is not a regular file"},
		"rule in a directory":     {files: map[string]string{ruletest.FileName: testFile("rules", "cm.yaml"), "rules/a.yaml": hostileRule, "rules/r.yaml": "-> /dev/zero"}, want: "rules: %DIR%/rules/r.yaml is not a regular file"},
		"cluster state is a fifo": {files: map[string]string{ruletest.FileName: testFile("rule.yaml", "cm.yaml") + "clusterState: [fifo.yaml]\n", "fifo.yaml": "|fifo"}, want: "clusterState: %DIR%/fifo.yaml is not a regular file"},
		"resource too big":        {files: map[string]string{ruletest.FileName: testFile("rule.yaml", "big.yaml")}, big: "big.yaml", want: "big.yaml is 16777217 bytes, over the 16777216"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, base)
			write(t, dir, tc.files)
			if tc.big != "" {
				// Sparse: the bound is checked before a byte is read.
				if err := os.WriteFile(filepath.Join(dir, tc.big), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(filepath.Join(dir, tc.big), ruletest.MaxInputBytes+1); err != nil {
					t.Fatal(err)
				}
			}
			r, _ := runIn(t, dir)
			want := strings.ReplaceAll(tc.want, "%DIR%", dir)
			if r.Err == nil || !strings.Contains(r.Err.Error(), want) {
				t.Errorf("error %v, want one containing %q", r.Err, want)
			}
		})
	}
}

// TestRefusesAliases: anchors and aliases, the makings of an alias bomb,
// are refused at their line before anything decodes them; so are an
// over-long path and inline objects that re-serialise past the file bound.
func TestRefusesAliases(t *testing.T) {
	one := "results:\n- {rule: r, resource: Pod/ns/p, result: pass}\n"
	// An empty tagged scalar grows when written back out: inline objects
	// may re-serialise larger than the file that holds them.
	grows := "{apiVersion: v1, kind: Pod, a: [" + strings.Repeat("!!str , ", 130000) + "1]}"
	for name, tc := range map[string]struct{ data, want string }{
		"string alias": {"rules: [&p " + strings.Repeat("x", 1000) + ", " + strings.Repeat("*p, ", 999) + "*p]\nresources: [p.yaml]\n" + one,
			"t.yaml:1: anchors and aliases are not allowed in test files"},
		"map alias": {"rules: [r.yaml]\nresources:\n- &a {apiVersion: v1, kind: Pod}\n- *a\n" + one,
			"t.yaml:3: anchors and aliases are not allowed in test files"},
		"long path":      {"rules: [" + strings.Repeat("a", ruletest.MaxPathBytes+1) + "]\nresources: [p.yaml]\n" + one, "over the 4096 a path may have"},
		"absolute path":  {"rules: [r.yaml]\nresources: [/etc/passwd]\n" + one, `t.yaml:2: resources: "/etc/passwd" is absolute`},
		"inline too big": {"rules: [r.yaml]\nresources:\n- " + grows + "\n" + one, "the inline objects are"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ruletest.Parse("t.yaml", []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestConfinesPaths: a path that leaves the root, directly or through a
// link, is a broken test, and nothing of the file it names is printed.
func TestConfinesPaths(t *testing.T) {
	for name, resources := range map[string]string{
		"dot dot": "../victim/cm.yaml",
		"link":    "link/cm.yaml",
	} {
		t.Run(name, func(t *testing.T) {
			top := t.TempDir()
			write(t, top, map[string]string{"victim/cm.yaml": hostileCM, "repo/rule.yaml": hostileRule,
				"repo/" + ruletest.FileName: testFile("rule.yaml", resources), "repo/link": "-> ../victim"})
			r, out := runIn(t, filepath.Join(top, "repo"))
			if r.Err == nil || !strings.Contains(r.Err.Error(), "resolves outside") {
				t.Errorf("error %v, want one saying the path resolves outside the root", r.Err)
			}
			if strings.Contains(out, "s3cret") {
				t.Errorf("the victim's data is printed:\n%s", out)
			}
		})
	}
	// The same file under the root runs: the confinement is no blanket ban.
	top := t.TempDir()
	write(t, top, map[string]string{"cm.yaml": hostileCM, "rules/rule.yaml": hostileRule, "tests/" + ruletest.FileName: testFile("../rules", "../cm.yaml")})
	r := ruletest.Run(context.Background(), filepath.Join(top, "tests", ruletest.FileName), ruletest.Options{Root: top})
	if r.Err != nil || r.Mismatches() != 1 {
		t.Errorf("a test under its root: error %v, %d mismatches, want none and 1", r.Err, r.Mismatches())
	}
}

// TestRefusesUnprintable: a container, rule or resource that could forge a
// CI log line is refused at its line.
func TestRefusesUnprintable(t *testing.T) {
	head := "rules: [r.yaml]\nresources: [p.yaml]\nresults:\n"
	for name, tc := range map[string]struct{ exp, want string }{
		"workflow command in container": {`{rule: r, resource: Pod/ns/p, container: "c\n::error title=x::forged", result: pass}`, `t.yaml:4: container "c\n::error title=x::forged": a container name is a DNS label`},
		"escape in rule":                {`{rule: "r\e[31m", resource: Pod/ns/p, result: pass}`, `rule "r\x1b[31m" holds a character that is not printable`},
		"newline in resource name":      {`{rule: r, resource: "Pod/ns/p\n::error::x", result: pass}`, `holds a character that is not printable`},
		"bad namespace":                 {`{rule: r, resource: "Pod/N S/p", result: pass}`, `the namespace "N S" is not a DNS label`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ruletest.Parse("t.yaml", []byte(head+"- "+tc.exp+"\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestOutputEscapes: what reaches the output from a rule's message or a
// path (which Parse cannot vet) has its control characters escaped in the
// table and in JUnit, so no line of the output starts a workflow command.
func TestOutputEscapes(t *testing.T) {
	forged := "x\n::error title=forged::pwned\x1b[31m"
	rs := []ruletest.FileResult{{Path: "p" + forged, Name: "n" + forged, Checks: []ruletest.Check{{
		Expectation: ruletest.Expectation{Rule: "r" + forged, Resource: "Pod/ns/p" + forged, Container: "c" + forged, Result: "pass", Line: 3},
		Got:         "fail", Messages: []string{"m" + forged},
	}}}, {Path: "broken.yaml", Err: &os.PathError{Op: "read", Path: "b" + forged, Err: os.ErrInvalid}}}
	for _, format := range []string{"table", "junit"} {
		t.Run(format, func(t *testing.T) {
			var b bytes.Buffer
			if err := ruletest.Write(&b, format, rs); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "::") {
					t.Errorf("a line starts a workflow command: %q", line)
				}
			}
			if strings.ContainsRune(out, '\x1b') || strings.Contains(out, "&#x1B;") {
				t.Errorf("an escape character is printed raw:\n%s", out)
			}
			if !strings.Contains(out, `\n::error`) {
				t.Errorf("the newline is not shown escaped:\n%s", out)
			}
		})
	}
}

// TestDefaultRootIsTheCheckout: run from the checkout, a test given on its
// own may name the rules above its directory (the working directory is the
// root); a test outside the working directory is confined to what it was
// given.
func TestDefaultRootIsTheCheckout(t *testing.T) {
	cwd := t.TempDir()
	for p, want := range map[string]string{
		"rules/x/testdata":        ".",
		filepath.Join(cwd, "a/b"): ".",
		"../elsewhere":            "../elsewhere",
		"/abs/outside":            "/abs/outside",
	} {
		if got := ruletest.DefaultRoot(p, cwd); got != want {
			t.Errorf("DefaultRoot(%q) = %q, want %q", p, got, want)
		}
	}
}
