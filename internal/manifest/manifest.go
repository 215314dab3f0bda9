// Package manifest reads Kubernetes-style YAML and JSON streams: multi-document
// files, directories, List kinds and standard input, keeping the file and line
// of every document so errors point at the input.
package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vilaca/portal/internal/reuse"
)

// Document is one YAML document of a stream.
type Document struct {
	Path string
	// Line is the 1-based line of the document's first line in Path.
	Line int
	Data []byte

	// kind and err are set by StreamItems for the parts of a List it cut.
	kind docKind
	// err is a problem found while cutting the document: Objects returns it.
	err error
}

// Error is a problem with one document, located for the user.
type Error struct {
	Path string
	Line int
	// Column is 1-based; 0 when only the line is known.
	Column int
	Err    error
}

func (e *Error) Error() string {
	if e.Line > 0 && e.Column > 0 {
		return fmt.Sprintf("%s:%d:%d: %v", e.Path, e.Line, e.Column, e.Err)
	}
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %v", e.Path, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Path, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// MaxStdin bounds what is read from standard input, so a runaway pipe fails
// with an error instead of exhausting memory.
const MaxStdin = 256 << 20

var separator = regexp.MustCompile(`^---(\s.*)?$`)

// Split cuts a YAML stream into documents, dropping empty ones (blank lines
// and comments only).
func Split(path string, data []byte) []Document {
	var docs []Document
	start, line := 1, 1
	var cur bytes.Buffer
	flush := func() {
		if !blank(cur.Bytes()) {
			docs = append(docs, Document{Path: path, Line: start, Data: slices.Clone(cur.Bytes())})
		}
		cur.Reset()
	}
	for text := range bytes.Lines(data) {
		text = bytes.TrimRight(text, "\r\n")
		if bytes.HasPrefix(text, []byte("---")) && separator.Match(text) {
			flush()
			start = line + 1
		} else {
			if cur.Len() == 0 && blankLine(text) {
				start = line + 1
			} else {
				cur.Write(text)
				cur.WriteByte('\n')
			}
		}
		line++
	}
	flush()
	return docs
}

func blankLine(l []byte) bool {
	t := bytes.TrimSpace(l)
	return len(t) == 0 || t[0] == '#'
}

func blank(doc []byte) bool {
	for l := range bytes.Lines(doc) {
		if !blankLine(l) {
			return false
		}
	}
	return true
}

// ReadPaths reads every document under paths: files, directories (walked for
// .yaml, .yml and .json files) and "-" for stdin.
//
// A file named twice, directly or through two of the paths (a directory and a
// file in it, the same directory twice, a symbolic link), is read once, so
// overlapping arguments never double the results.
func ReadPaths(paths []string, stdin io.Reader) ([]Document, error) {
	var docs []Document
	for d, err := range Stream(paths, stdin) {
		if err != nil {
			return nil, err
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// FileSet remembers which files were already read, by their resolved path.
type FileSet map[string]struct{}

// First reports whether path is new to the set and adds it. Paths that cannot
// be resolved are compared as written.
func (s FileSet) First(path string) bool {
	key := path
	if abs, err := filepath.Abs(path); err == nil {
		key = abs
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			key = real
		}
	}
	if _, ok := s[key]; ok {
		return false
	}
	s[key] = struct{}{}
	return true
}

// TestFileName is the name of a rule test file (`portal test`): it lives
// beside rules and fixtures, and is neither.
const TestFileName = "portal-test.yaml"

// Files lists the YAML and JSON files at p: p itself when it is a file, or
// every such file under it in lexical order, skipping hidden and testdata
// directories and rule test files (TestFileName).
func Files(p string) ([]string, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{p}, nil
	}
	var files []string
	err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// testdata holds fixtures next to the files that use them, never
		// inputs of their own.
		if d.IsDir() && path != p && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && IsManifestFile(path) && d.Name() != TestFileName {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// IsManifestFile reports whether path names a YAML or JSON file.
func IsManifestFile(path string) bool {
	switch filepath.Ext(path) {
	case ".yaml", ".yml", ".json":
		return !strings.HasPrefix(filepath.Base(path), ".")
	}
	return false
}

// Objects decodes a document into objects, expanding List kinds. Every object
// must have apiVersion and kind.
func (d Document) Objects() ([]*unstructured.Unstructured, error) {
	return d.ObjectsReusing(nil)
}

// ObjectsReusing is Objects, decoding into the maps and lists r holds. The
// caller may hand each object's tree back to r once done with it
// (reuse.Pool.Release). r may be nil.
func (d Document) ObjectsReusing(r *reuse.Pool) ([]*unstructured.Unstructured, error) {
	if d.err != nil {
		return nil, d.Errorf("%v", d.err)
	}
	m, err := decode(d.Data, r)
	if err != nil {
		e := d.SyntaxError(err)
		e.Err = fmt.Errorf("%w%s", e.Err, templateHint(d.Data))
		return nil, e
	}
	if m == nil {
		switch d.kind {
		case listItem:
			return nil, d.Errorf("List item is not an object")
		case listEnvelope:
			// items: alone is a List without apiVersion or kind.
			return nil, d.Errorf("object has no apiVersion or kind")
		}
		return nil, nil
	}
	obj := &unstructured.Unstructured{Object: m}
	if obj.GetAPIVersion() == "" || obj.GetKind() == "" {
		if d.kind == listItem {
			return nil, d.Errorf("List item has no apiVersion or kind")
		}
		if looksLikePlainRule(m) {
			// The usual cause: --file (or a test file's resources) given the
			// rules' directory, or a tree holding rules and manifests.
			return nil, d.Errorf("object has no apiVersion or kind: this is a plain Portal rule, not a Kubernetes object; rule files go to --rules")
		}
		return nil, d.Errorf("object has no apiVersion or kind")
	}
	switch d.kind {
	case listItem:
		// An item is never expanded, whatever it holds, as ToList does not.
		return []*unstructured.Unstructured{obj}, nil
	case listEnvelope:
		if _, ok := m["items"]; ok {
			return nil, d.Errorf(`mapping key "items" already defined`)
		}
		return nil, nil
	}
	if !obj.IsList() {
		return []*unstructured.Unstructured{obj}, nil
	}
	list, err := obj.ToList()
	if err != nil {
		return nil, d.Errorf("read %s: %v", obj.GetKind(), err)
	}
	out := make([]*unstructured.Unstructured, 0, len(list.Items))
	for i := range list.Items {
		it := &list.Items[i]
		if it.GetAPIVersion() == "" || it.GetKind() == "" {
			return nil, d.Errorf("%s item %d has no apiVersion or kind", obj.GetKind(), i)
		}
		out = append(out, it)
	}
	return out, nil
}

// Errorf returns an Error located at the document.
func (d Document) Errorf(format string, args ...any) *Error {
	return &Error{Path: d.Path, Line: d.Line, Err: fmt.Errorf(format, args...)}
}

var (
	yamlLine     = regexp.MustCompile(`line (\d+):`)
	yamlPrefix   = regexp.MustCompile(`^(yaml: )?line (\d+): `)
	jsonPrefixes = []string{"error converting YAML to JSON: ", "error unmarshaling JSON: ", "while decoding JSON: "}
)

// YAMLError rewrites the document-relative line numbers of a YAML error so
// they count from the start of the file, and drops the decoders' prefixes.
func YAMLError(err error, docLine int) string {
	msg := err.Error()
	for _, p := range jsonPrefixes {
		msg = strings.ReplaceAll(msg, p, "")
	}
	return yamlLine.ReplaceAllStringFunc(msg, func(s string) string {
		n, _ := strconv.Atoi(yamlLine.FindStringSubmatch(s)[1])
		return fmt.Sprintf("line %d:", n+docLine-1)
	})
}

// SyntaxError locates a decoding error of d at the line the decoder names,
// so the message reads "file.yaml:12: did not find expected key".
func (d Document) SyntaxError(err error) *Error {
	msg := YAMLError(err, d.Line)
	if m := yamlPrefix.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[2])
		return &Error{Path: d.Path, Line: line, Err: errors.New(msg[len(m[0]):])}
	}
	return &Error{Path: d.Path, Line: d.Line, Err: errors.New(msg)}
}

// templateHint explains a syntax error in data holding template actions:
// a chart's templates/ passed as manifests, the usual first try.
func templateHint(data []byte) string {
	if !bytes.Contains(data, []byte("{{")) {
		return ""
	}
	return " (it holds {{ }}: a Helm or Go template? render it first, as in helm template CHART | portal eval --rules RULES --file -)"
}

// looksLikePlainRule reports whether a document without apiVersion and kind
// has the shape of a plain rule file: a string rule and a match or a name.
func looksLikePlainRule(m map[string]any) bool {
	if _, ok := m["rule"].(string); !ok {
		return false
	}
	_, match := m["match"]
	_, name := m["name"]
	return match || name
}
