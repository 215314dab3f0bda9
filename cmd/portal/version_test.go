package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// TestVersionJSON: `portal version -o json` is the machine-readable form bug
// reports and scripts rely on: every field present, the Go version real.
func TestVersionJSON(t *testing.T) {
	out, err := runCLI(t, "", "version", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	for _, k := range []string{"version", "commit", "modified", "goVersion", "platform"} {
		if _, ok := v[k]; !ok {
			t.Errorf("no %q in %s", k, out)
		}
	}
	if v["goVersion"] != runtime.Version() {
		t.Errorf("goVersion %v, want %s", v["goVersion"], runtime.Version())
	}
	text, err := runCLI(t, "", "version")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"portal ", "commit: ", "go: " + runtime.Version()} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}
	if _, err := runCLI(t, "", "version", "-o", "xml"); exitCodeOf(err) != exitUsage {
		t.Errorf("-o xml: %v, want a usage error", err)
	}
}
