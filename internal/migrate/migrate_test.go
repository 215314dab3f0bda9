package migrate

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/rule"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

const pocDir = "../../examples/rules/poc"

func pocFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(pocDir, "*.yaml"))
	if err != nil || len(files) != 6 {
		t.Fatalf("want the 6 POC example rules in %s, got %v (%v)", pocDir, files, err)
	}
	return files
}

func mustMigrate(t *testing.T, path string, data []byte, f Format) []byte {
	t.Helper()
	out, err := Migrate(path, data, f)
	if err != nil {
		t.Fatalf("migrate %s to %s: %v", path, f, err)
	}
	return out
}

// TestMigratePOCExamples migrates the example POC rules in both formats and
// checks the output against the golden files, that every rule loads and
// compiles in Portal, and that migration is idempotent.
func TestMigratePOCExamples(t *testing.T) {
	for _, path := range pocFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		outs := map[Format][]byte{}
		for _, f := range Formats {
			out := mustMigrate(t, path, data, f)
			outs[f] = out
			golden(t, filepath.Join("testdata", "golden", string(f), filepath.Base(path)), out)
			assertCompiles(t, path, out)
			if again := mustMigrate(t, "out.yaml", out, f); !bytes.Equal(again, out) {
				t.Errorf("%s (%s): migrating the output again changed it:\n--- first\n%s--- second\n%s", path, f, out, again)
			}
		}
		// Converting between the formats lands on the same documents as
		// migrating straight to the target format.
		if got := mustMigrate(t, "cr.yaml", outs[FormatCR], FormatFolder); !bytes.Equal(got, outs[FormatFolder]) {
			t.Errorf("%s: cr -> folder:\n%s\nwant:\n%s", path, got, outs[FormatFolder])
		}
		if got := mustMigrate(t, "folder.yaml", outs[FormatFolder], FormatCR); !bytes.Equal(got, outs[FormatCR]) {
			t.Errorf("%s: folder -> cr:\n%s\nwant:\n%s", path, got, outs[FormatCR])
		}
	}
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run go test -update if the change is intended):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// assertCompiles loads the migrated documents the way portal eval and the
// controller do.
func assertCompiles(t *testing.T, path string, out []byte) {
	t.Helper()
	parsed, errs := rule.ParseFile(path, out)
	if len(errs) > 0 {
		t.Fatalf("%s: migrated rules do not parse: %v\n%s", path, errs, out)
	}
	if len(parsed) == 0 {
		t.Fatalf("%s: no rules in the output", path)
	}
	eng := engine.New(exprlang.New())
	for _, r := range parsed {
		if _, err := eng.Compile(r); err != nil {
			t.Errorf("%s: %v", path, err)
		}
		if len(r.Modes) != 1 || r.Modes[0] != "audit" || len(r.Match.GVKs) != 1 || r.Match.GVKs[0].Kind != "Pod" {
			t.Errorf("%s: rule %q: want mode [audit] on v1 Pods, got %v on %v", path, r.Name, r.Modes, r.Match.GVKs)
		}
	}
}

// TestMigrateAllInOneStream migrates the examples as one multi-document
// stream, as `cat *.yaml | portal migrate-rules -` would.
func TestMigrateAllInOneStream(t *testing.T) {
	var stream bytes.Buffer
	for _, path := range pocFiles(t) {
		data, _ := os.ReadFile(path)
		stream.WriteString("---\n")
		stream.Write(data)
	}
	out := mustMigrate(t, "<stdin>", stream.Bytes(), FormatCR)
	assertCompiles(t, "<stdin>", out)
	if n := len(ObjectNames(out)); n != 6 {
		t.Errorf("want 6 manifests, got %d: %v", n, ObjectNames(out))
	}
	if again := mustMigrate(t, "<stdin>", out, FormatCR); !bytes.Equal(again, out) {
		t.Errorf("not idempotent:\n%s\n---\n%s", out, again)
	}
}

// TestPassThrough covers documents that are already Portal rules.
func TestPassThrough(t *testing.T) {
	tests := []struct {
		name, in string
		format   Format
		want     string
	}{{
		name:   "plain rule to folder is normalised",
		format: FormatFolder,
		in:     "{\"name\": \"x\", \"match\": {\"gvk\": [{\"group\": \"\", \"kind\": \"Pod\"}]}, \"rule\": \"spec.hostPID == true\"}\n",
		want:   "name: x\nmatch:\n  gvk:\n    - {group: \"\", kind: Pod}\nrule: |-\n  spec.hostPID == true\n",
	}, {
		name:   "plain rule to cr is wrapped",
		format: FormatCR,
		in:     "name: Host PID!\nmatch: {gvk: [{kind: Pod}]}\nrule: spec.hostPID == true\n",
		want:   "apiVersion: portal.io/v1alpha1\nkind: PortalClusterRule\nmetadata:\n  name: host-pid\nspec:\n  name: Host PID!\n  match:\n    gvk:\n      - {kind: Pod}\n  rule: |-\n    spec.hostPID == true\n",
	}, {
		name:   "cluster rule keeps its metadata",
		format: FormatCR,
		in:     "apiVersion: portal.io/v1alpha1\nkind: PortalClusterRule\nmetadata:\n  name: a\n  labels: {team: sec}\nspec:\n  match: {gvk: [{kind: Pod}]}\n  rule: \"true\"\n",
		want:   "apiVersion: portal.io/v1alpha1\nkind: PortalClusterRule\nmetadata:\n  name: a\n  labels:\n    team: sec\nspec:\n  match:\n    gvk:\n      - {kind: Pod}\n  rule: |-\n    true\n",
	}, {
		name:   "cluster rule to folder takes its name from metadata",
		format: FormatFolder,
		in:     "# about a\napiVersion: portal.io/v1alpha1\nkind: PortalClusterRule\nmetadata:\n  name: a\nspec:\n  match: {gvk: [{kind: Pod}]}\n  rule: \"true\"\n",
		want:   "# about a\nname: a\nmatch:\n  gvk:\n    - {kind: Pod}\nrule: |-\n  true\n",
	}, {
		name:   "namespaced rule stays a PortalRule",
		format: FormatCR,
		in:     "apiVersion: portal.io/v1alpha1\nkind: PortalRule\nmetadata: {name: a, namespace: team}\nspec:\n  match: {gvk: [{kind: Pod}]}\n  rule: \"true\"\n",
		want:   "apiVersion: portal.io/v1alpha1\nkind: PortalRule\nmetadata:\n  name: a\n  namespace: team\nspec:\n  match:\n    gvk:\n      - {kind: Pod}\n  rule: |-\n    true\n",
	}}
	for _, tt := range tests {
		got, err := Migrate("in.yaml", []byte(tt.in), tt.format)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if string(got) != tt.want {
			t.Errorf("%s:\n--- got\n%s--- want\n%s", tt.name, got, tt.want)
		}
		if again := mustMigrate(t, "out.yaml", got, tt.format); !bytes.Equal(again, got) {
			t.Errorf("%s: not idempotent:\n%s---\n%s", tt.name, got, again)
		}
	}
}

// TestMigrateErrors checks that bad input fails with the file, the line, the
// rule and the construct.
func TestMigrateErrors(t *testing.T) {
	const head = "name: bad\nseverity: high\nfilter:\n  namespace: [prod]\n"
	tests := []struct {
		name, in string
		format   Format
		want     []string
	}{
		{"type reference", head + "rule: T(java.lang.Math).random() > 0.5\n", FormatCR,
			[]string{"bad.yaml:5:", `rule "bad"`, "T(java.lang.Math)", "column 1"}},
		{"method call", head + "rule: >\n  container.name == 'x'\n  or container.name.substring(1) == 'y'\n", FormatCR,
			[]string{"bad.yaml:5:", `rule "bad"`, ".substring()"}},
		{"unknown field", "name: bad\nlabels: {a: b}\nrule: 'true'\n", FormatCR,
			[]string{"bad.yaml:2:", `unknown POC rule field "labels"`}},
		{"no name", "rule: 'true'\n", FormatCR, []string{"bad.yaml:1:", "no name"}},
		{"no rule", "name: bad\n", FormatCR, []string{"bad.yaml:1:", "rule (the SpEL expression) is required"}},
		{"bad filter", "name: bad\nfilter: {labels: [x]}\nrule: 'true'\n", FormatCR,
			[]string{"bad.yaml:2:", `unknown filter field "labels"`}},
		{"bad severity", "name: bad\nseverity: urgent\nrule: 'true'\n", FormatCR, []string{"bad.yaml:1:", `severity "urgent"`}},
		{"second document", head + "rule: 'true'\n---\n\nname: worse\nrule: '#x'\n", FormatCR,
			[]string{"bad.yaml:9:", `rule "worse"`, "variable reference #x"}},
		{"yaml syntax", "name: [bad\n", FormatCR, []string{"bad.yaml:", "did not find expected"}},
		{"not a mapping", "- a\n- b\n", FormatCR, []string{"bad.yaml:1:", "must be a mapping"}},
		{"other kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", FormatCR, []string{"bad.yaml:1:", "v1 Pod is neither a POC rule nor a Portal rule"}},
		{"filter and match", "name: x\nfilter: {namespace: [a]}\nmatch: {gvk: [{kind: Pod}]}\nrule: 'true'\n", FormatCR, []string{"both filter (POC) and match (Portal)"}},
		{"PortalRule to folder", "apiVersion: portal.io/v1alpha1\nkind: PortalRule\nmetadata: {name: a, namespace: team}\nspec:\n  match: {gvk: [{kind: Pod}]}\n  rule: \"true\"\n", FormatFolder,
			[]string{"PortalRule team/a is namespaced", "--format=cr"}},
		{"broken Portal rule", "name: x\nmatch: {gvk: [{kind: Pod}]}\nrule: container.name ==\n", FormatFolder, []string{"bad.yaml:1:", `rule "x": compile expression`}},
		{"duplicate names", "name: Same Name\nrule: 'true'\n---\nname: same-name\nrule: 'false'\n", FormatCR,
			[]string{"bad.yaml:4:", `metadata.name "same-name" is already used by the rule at line 1`}},
		{"unnameable", "name: '***'\nrule: 'true'\n", FormatCR, []string{"yields no valid object name"}},
		{"bad format", "name: x\nrule: 'true'\n", "json", []string{`format "json"`}},
	}
	for _, tt := range tests {
		out, err := Migrate("bad.yaml", []byte(tt.in), tt.format)
		if err == nil {
			t.Errorf("%s: no error; output:\n%s", tt.name, out)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not contain %q", tt.name, err, w)
			}
		}
	}
}

func TestObjectName(t *testing.T) {
	for in, want := range map[string]string{
		"privileged container":           "privileged-container",
		"  Run as ROOT (uid 0)!  ":       "run-as-root-uid-0",
		"missing readOnlyRootFilesystem": "missing-readonlyrootfilesystem",
		"a.b_c":                          "a-b-c",
		strings.Repeat("x", 62) + " yz":  strings.Repeat("x", 62),
	} {
		got, err := ObjectName(in)
		if err != nil || got != want {
			t.Errorf("ObjectName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestCommentsSurvive checks that comments on a POC rule carry over to the
// migrated rule in both formats, and that they stay put through re-runs and
// format conversions.
func TestCommentsSurvive(t *testing.T) {
	in := "# File header.\n\n# About the rule.\nname: commented   # the name\n# severity matters\nseverity: HIGH\n" +
		"filter:   # where\n  namespace:\n    - prod   # production\n    - stage\nrule: >   # spel\n  container.name == 'x'\n" +
		"# before alert\nalert: a\n# trailing\n---\n# second doc\nname: second\nrule: \"true\"\n"
	wantComments := []string{"# File header.", "# About the rule.", "# the name", "# severity matters", "match: # where", "# production", "rule: |- # spel", "# before alert", "# trailing", "# second doc"}
	for _, f := range Formats {
		out := mustMigrate(t, "c.yaml", []byte(in), f)
		for _, c := range wantComments {
			if !strings.Contains(string(out), c) {
				t.Errorf("%s: output lost %q:\n%s", f, c, out)
			}
		}
		if again := mustMigrate(t, "c.yaml", out, f); !bytes.Equal(again, out) {
			t.Errorf("%s: not idempotent:\n%s---\n%s", f, out, again)
		}
		other := map[Format]Format{FormatCR: FormatFolder, FormatFolder: FormatCR}[f]
		back := mustMigrate(t, "c.yaml", mustMigrate(t, "c.yaml", out, other), f)
		if !bytes.Equal(back, out) {
			t.Errorf("%s -> %s -> %s changed the output:\n%s---\n%s", f, other, f, out, back)
		}
	}
}
