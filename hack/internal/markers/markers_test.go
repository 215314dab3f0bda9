package markers

import (
	"bytes"
	"strings"
	"testing"
)

func TestReplace(t *testing.T) {
	page := "intro\n<!-- generated:start t by gen -->\nold\n<!-- generated:end t -->\noutro\n"
	got, err := Replace([]byte(page), "t", []byte("new"))
	if err != nil {
		t.Fatal(err)
	}
	want := "intro\n<!-- generated:start t by gen -->\nnew\n<!-- generated:end t -->\noutro\n"
	if string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestReplaceErrors(t *testing.T) {
	for name, page := range map[string]string{
		"no start":    "text\n",
		"no end":      "<!-- generated:start t x -->\nbody\n",
		"twice":       "<!-- generated:start t x -->\n<!-- generated:end t -->\n<!-- generated:start t x -->\n<!-- generated:end t -->\n",
		"not at line": "text <!-- generated:start t x -->\n<!-- generated:end t -->\n",
	} {
		if _, err := Replace([]byte(page), "t", []byte("x")); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// Whatever the page, a successful replacement holds the content between its
// markers, and replacing again with the same content changes nothing.
func FuzzReplace(f *testing.F) {
	f.Add([]byte("a\n<!-- generated:start t x -->\nb\n<!-- generated:end t -->\nc"), []byte("new\n"))
	f.Add([]byte("<!-- generated:start t -->\n<!-- generated:end t -->"), []byte(""))
	f.Fuzz(func(t *testing.T, page, content []byte) {
		if bytes.Contains(content, []byte("<!-- generated:")) {
			return
		}
		out, err := Replace(page, "t", content)
		if err != nil {
			return
		}
		if !bytes.Contains(out, bytes.TrimSuffix(content, []byte("\n"))) {
			t.Fatalf("output %q lacks the content %q", out, content)
		}
		again, err := Replace(out, "t", content)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("second replacement: %q, %v; want %q", again, err, out)
		}
		if !strings.Contains(string(out), "<!-- generated:end t -->") {
			t.Fatalf("end marker lost: %q", out)
		}
	})
}
