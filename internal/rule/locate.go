package rule

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	yaml "go.yaml.in/yaml/v3"

	"github.com/vilaca/portal/internal/didyoumean"
	"github.com/vilaca/portal/internal/manifest"
)

// FieldError is a problem with one field of a rule. Field is the path from
// the rule spec's root in the form users read in docs and kubectl explain:
// "match.gvk[0].kind", "actions[1].type". The message names the field itself,
// so the error reads well without a location too (in a custom resource's
// status, say).
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field string, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// tree is one YAML document with its node positions, so errors can point at
// the line and column of the field or expression character they are about.
type tree struct {
	doc  manifest.Document
	root *yaml.Node // the document's top mapping, nil when it does not parse
	// spec is the mapping rule fields live in: the root for a plain rule,
	// its spec for a custom resource.
	spec *yaml.Node
	// lines are the document's source lines, for block scalars.
	lines []string
}

func newTree(d manifest.Document) *tree {
	t := &tree{doc: d, lines: strings.Split(string(d.Data), "\n")}
	var n yaml.Node
	if yaml.Unmarshal(d.Data, &n) != nil || n.Kind != yaml.DocumentNode || len(n.Content) == 0 {
		return t
	}
	if root := n.Content[0]; root.Kind == yaml.MappingNode {
		t.root, t.spec = root, root
	}
	return t
}

// withSpec makes spec the root of field paths, for custom resources.
func (t *tree) withSpec() *tree {
	if t.root != nil {
		t.spec = value(t.root, "spec")
	}
	return t
}

// value returns the value node of key in mapping m.
func value(m *yaml.Node, key string) *yaml.Node { return manifest.MapValue(m, key) }

var pathPart = regexp.MustCompile(`([^.\[\]]+)|\[(\d+)\]`)

// find returns the node at a field path below the spec, and the deepest node
// found on the way when the path does not exist (a missing required field is
// reported at its parent).
func (t *tree) find(field string) *yaml.Node {
	n := t.spec
	if n == nil {
		return nil
	}
	for _, m := range pathPart.FindAllStringSubmatch(field, -1) {
		var next *yaml.Node
		if m[2] != "" {
			i, _ := strconv.Atoi(m[2])
			if n.Kind == yaml.SequenceNode && i < len(n.Content) {
				next = n.Content[i]
			}
		} else {
			next = value(n, m[1])
		}
		if next == nil {
			return n
		}
		n = next
	}
	return n
}

// at locates node in the file: its line and 1-based column.
func (t *tree) at(n *yaml.Node) (line, col int) {
	if n == nil {
		return t.doc.Line, 0
	}
	return t.doc.Line + n.Line - 1, n.Column
}

// errorAt returns err located at node.
func (t *tree) errorAt(n *yaml.Node, err error) *manifest.Error {
	line, col := t.at(n)
	return &manifest.Error{Path: t.doc.Path, Line: line, Column: col, Err: err}
}

// locate places every error of a joined error at the field it names. Errors
// that name no field stay at the document.
func (t *tree) locate(err error) []error {
	var out []error
	for _, e := range flatten(err) {
		var fe *FieldError
		if errors.As(e, &fe) {
			out = append(out, t.errorAt(t.find(fe.Field), e))
			continue
		}
		out = append(out, t.errorAt(nil, e))
	}
	return out
}

// flatten undoes errors.Join, also under a wrapping prefix, so each problem
// gets its own location. The prefix (the rule's name) is dropped: the
// location says more.
func flatten(err error) []error {
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		var out []error
		for _, x := range e.Unwrap() {
			out = append(out, flatten(x)...)
		}
		return out
	case interface{ Unwrap() error }:
		if inner := flatten(e.Unwrap()); len(inner) > 1 {
			return inner
		}
	}
	return []error{err}
}

// scalarPos locates the character at rune offset off of the value of scalar
// node n: exact for plain and quoted scalars on one line and for literal
// blocks (|), which is how expressions are written; for folded and multi-line
// flow scalars, at the source line that holds the text around it.
func (t *tree) scalarPos(n *yaml.Node, off int) (line, col int) {
	if n == nil || n.Kind != yaml.ScalarNode {
		return t.at(n)
	}
	valueLine, valueCol := lineCol(n.Value, off)
	switch {
	case n.Style&yaml.LiteralStyle != 0:
		// Content starts on the line after the indicator.
		if n.Line < len(t.lines) {
			return t.doc.Line + n.Line + valueLine, blockIndent(t.lines[n.Line:]) + valueCol + 1
		}
	case valueLine == 0 && !strings.Contains(n.Value, "\n") && n.Style&yaml.FoldedStyle == 0:
		quote := 0
		if n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0 {
			quote = 1
		}
		return t.doc.Line + n.Line - 1, n.Column + quote + valueCol
	}
	// Folded and multi-line flow scalars: find the source line holding the
	// text just before the character, searching from the node on.
	text := strings.Split(n.Value, "\n")[valueLine]
	r := []rune(text)
	valueCol = min(valueCol, len(r))
	start := max(0, valueCol-8)
	needle := string(r[start:min(len(r), valueCol+8)])
	for i := n.Line - 1; i < len(t.lines) && needle != ""; i++ {
		if j := strings.Index(t.lines[i], needle); j >= 0 {
			return t.doc.Line + i, utf8.RuneCountInString(t.lines[i][:j]) + valueCol - start + 1
		}
	}
	return t.at(n)
}

// lineCol converts a rune offset in s into a 0-based line and rune column.
func lineCol(s string, off int) (line, col int) {
	for i, r := range []rune(s) {
		if i == off {
			break
		}
		if r == '\n' {
			line++
			col = 0
			continue
		}
		col++
	}
	return line, col
}

// blockIndent is the indentation of a block scalar's content: that of its
// first non-blank line.
func blockIndent(lines []string) int {
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			return len(l) - len(strings.TrimLeft(l, " "))
		}
	}
	return 0
}

// unknownFields lists every mapping key under n that typ does not have, each
// located at the key and with the nearest known name as a suggestion. It
// reads json tags as encoding/json does, so it agrees with the decoder that
// follows it; unlike that decoder it finds every unknown field, not the first,
// and knows where each one is.
func (t *tree) unknownFields(n *yaml.Node, typ reflect.Type, path string) []error {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if n == nil {
		return nil
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	var errs []error
	switch typ.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return nil
		}
		fields := jsonFields(typ)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			ft, ok := fields[k.Value]
			if !ok {
				errs = append(errs, t.errorAt(k, unknownFieldError(join(path, k.Value), k.Value, fields)))
				continue
			}
			errs = append(errs, t.unknownFields(v, ft, join(path, k.Value))...)
		}
	case reflect.Slice, reflect.Array:
		if n.Kind == yaml.SequenceNode {
			for i, c := range n.Content {
				errs = append(errs, t.unknownFields(c, typ.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	case reflect.Map:
		if n.Kind == yaml.MappingNode {
			for i := 1; i < len(n.Content); i += 2 {
				errs = append(errs, t.unknownFields(n.Content[i], typ.Elem(), join(path, n.Content[i-1].Value))...)
			}
		}
	}
	return errs
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// jsonFields maps the JSON names of typ's fields to their types, following
// embedded and inline structs as encoding/json does.
func jsonFields(typ reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" && opts == "" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if (f.Anonymous && name == "") || slices.Contains(strings.Split(opts, ","), "inline") {
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					out[k] = v
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func unknownFieldError(path, name string, known map[string]reflect.Type) error {
	msg := fmt.Sprintf("unknown field %q", path)
	names := slices.Sorted(maps.Keys(known))
	if s := didyoumean.Closest(name, names); s != "" {
		return fmt.Errorf("%s: did you mean %q? (see docs/reference/rule-schema.md)", msg, s)
	}
	return fmt.Errorf("%s: expected one of %s (see docs/reference/rule-schema.md)", msg, strings.Join(names, ", "))
}
