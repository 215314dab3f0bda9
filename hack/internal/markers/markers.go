// Package markers replaces the generated blocks of a documentation page: the
// lines between "<!-- generated:start NAME ... -->" and "<!-- generated:end
// NAME -->". The prose around them stays hand-written; the generators in hack/
// own only what is between the markers, and their -check mode fails when a
// page differs from what they would write.
package markers

import (
	"bytes"
	"fmt"
	"os"
)

// Replace returns page with the block NAME replaced by content. The markers
// stay; content is written between them, ending with a newline.
func Replace(page []byte, name string, content []byte) ([]byte, error) {
	start := []byte("<!-- generated:start " + name + " ")
	end := []byte("<!-- generated:end " + name + " -->")
	i := lineIndex(page, start, 0)
	if i < 0 {
		return nil, fmt.Errorf("no line starting with %q", start)
	}
	nl := bytes.IndexByte(page[i:], '\n')
	if nl < 0 {
		return nil, fmt.Errorf("the marker %q ends the file", start)
	}
	bodyStart := i + nl + 1
	bodyEnd := lineIndex(page, end, bodyStart)
	if bodyEnd < 0 {
		return nil, fmt.Errorf("no line %q after %q", end, start)
	}
	if lineIndex(page, start, bodyEnd) >= 0 || lineIndex(page, start, bodyStart) >= 0 {
		return nil, fmt.Errorf("the block %q appears twice", name)
	}
	out := make([]byte, 0, len(page)+len(content)+1)
	out = append(out, page[:bodyStart]...)
	out = append(out, content...)
	// Appended to out, not to content: the caller's slice may share its array.
	if len(content) > 0 && content[len(content)-1] != '\n' {
		out = append(out, '\n')
	}
	out = append(out, page[bodyEnd:]...)
	return out, nil
}

// lineIndex is the index of the first line at or after from that starts with
// prefix, or -1.
func lineIndex(page, prefix []byte, from int) int {
	for i := from; i <= len(page)-len(prefix); {
		j := bytes.Index(page[i:], prefix)
		if j < 0 {
			return -1
		}
		if k := i + j; k == 0 || page[k-1] == '\n' {
			return k
		}
		i += j + 1
	}
	return -1
}

// Block is one generated block of a page.
type Block struct {
	Name    string
	Content []byte
}

// Update writes the blocks into the page at path or, with check, only
// compares: it fails when the page differs from what it would write, naming
// the command that regenerates it.
func Update(path string, blocks []Block, check bool, regenerate string) error {
	page, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out := page
	for _, b := range blocks {
		if out, err = Replace(out, b.Name, b.Content); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if !check {
		if bytes.Equal(out, page) {
			return nil
		}
		return os.WriteFile(path, out, 0o644)
	}
	if !bytes.Equal(out, page) {
		return fmt.Errorf("%s is out of date: run %s and commit it", path, regenerate)
	}
	return nil
}
