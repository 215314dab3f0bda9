// Package migrate rewrites rules written for the podwatcher POC (SpEL
// expressions, a filter.namespace selector) into Portal rules: expr-lang
// expressions with a match block, as PortalClusterRule manifests or as
// folder-format plain rules. It holds a tokenizer, parser and printer for the
// SpEL subset the POC used, the file-level rewrite behind `portal
// migrate-rules`, and a small SpEL evaluator tests use to check that a
// migrated rule flags exactly what the original did.
//
// Migration is idempotent: documents that are already Portal rules pass
// through, normalised, so running the migrator on its own output returns it
// unchanged.
package migrate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/manifest"
	"github.com/vilaca/portal/internal/rule"
)

// Format is the shape migrated rules are written in.
type Format string

const (
	// FormatCR writes PortalClusterRule manifests, for kubectl apply.
	FormatCR Format = "cr"
	// FormatFolder writes plain rules, for --rules-folder and portal eval.
	FormatFolder Format = "folder"
)

// Formats lists the output formats.
var Formats = []Format{FormatCR, FormatFolder}

// ParseFormat validates a format name.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("format %q: use cr or folder", s)
}

// Migrated rules match what the POC audited: Pods, in the audit loop.
var (
	podGVK    = [][2]string{{"group", ""}, {"version", "v1"}, {"kind", "Pod"}}
	pocModes  = []string{"audit"}
	apiVer    = policyv1alpha1.GroupVersion.String()
	pocFields = []string{"name", "enabled", "severity", "filter", "rule", "alert"}
)

// Migrate rewrites the rule documents in data, read from path (used in
// errors), into format. POC documents are translated; documents that are
// already Portal rules (plain or PortalClusterRule/PortalRule) are validated
// and passed through normalised, converted to format when they are in the
// other one. Every output rule is checked to load and compile in Portal.
// Errors are located at path:line and all are reported together.
func Migrate(path string, data []byte, format Format) ([]byte, error) {
	if _, err := ParseFormat(string(format)); err != nil {
		return nil, err
	}
	docs, err := decode(path, data)
	if err != nil {
		return nil, err
	}
	var (
		out   []*yaml.Node
		errs  []error
		names = map[string]int{}
	)
	eng := engine.New(exprlang.New())
	for _, d := range docs {
		o, err := migrateDoc(path, d, format)
		if err == nil {
			err = check(eng, path, o)
		}
		if err == nil && format == FormatCR {
			err = uniqueName(path, o, names)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, o)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return encode(out)
}

// decode reads every non-empty document of a YAML (or JSON) stream.
func decode(path string, data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var d yaml.Node
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, yamlError(path, err)
		}
		if len(d.Content) > 0 && !isNull(d.Content[0]) {
			docs = append(docs, &d)
		}
	}
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

func yamlError(path string, err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &manifest.Error{Path: path, Line: line, Err: errors.New(msg[len(m[0]):])}
	}
	return &manifest.Error{Path: path, Err: errors.New(strings.TrimPrefix(msg, "yaml: "))}
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// migrateDoc turns one document into a Portal rule document in format.
func migrateDoc(path string, doc *yaml.Node, format Format) (*yaml.Node, error) {
	root := doc.Content[0]
	fail := func(line int, format string, args ...any) error {
		return &manifest.Error{Path: path, Line: line, Err: fmt.Errorf(format, args...)}
	}
	if root.Kind != yaml.MappingNode {
		return nil, fail(root.Line, "a rule document must be a mapping, not a %s", kindName(root))
	}
	av, kind := scalarValue(root, "apiVersion"), scalarValue(root, "kind")
	var (
		out *yaml.Node
		err error
	)
	switch {
	case av == "" && kind == "" && get(root, "match") == nil:
		spec, perr := pocSpec(path, root)
		if perr != nil {
			return nil, perr
		}
		out, err = plainTo(spec, format)
	case av == "" && kind == "":
		if get(root, "filter") != nil {
			return nil, fail(root.Line, "document has both filter (POC) and match (Portal): remove filter and keep match")
		}
		out, err = plainTo(root, format)
	case av == apiVer && (kind == "PortalClusterRule" || kind == "PortalRule"):
		out, err = crTo(root, kind, format)
	default:
		return nil, fail(root.Line, "%s %s is neither a POC rule nor a Portal rule (plain, or %s PortalClusterRule/PortalRule)", orNone(av), orNone(kind), apiVer)
	}
	if err != nil {
		return nil, fail(root.Line, "%v", err)
	}
	canonical(out)
	return &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{out},
		HeadComment: doc.HeadComment, LineComment: doc.LineComment, FootComment: doc.FootComment, Line: root.Line}, nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// pocSpec translates a POC rule into the Portal rule schema.
func pocSpec(path string, root *yaml.Node) (*yaml.Node, error) {
	fields, err := pocFieldsOf(path, root)
	if err != nil {
		return nil, err
	}
	name := fields["name"]
	if name == nil || name.val.Kind != yaml.ScalarNode || name.val.Value == "" {
		return nil, &manifest.Error{Path: path, Line: root.Line, Err: errors.New("POC rule has no name")}
	}
	ruleName := name.val.Value
	fail := func(line int, err error) error {
		return &manifest.Error{Path: path, Line: line, Err: fmt.Errorf("rule %q: %w", ruleName, err)}
	}
	expr := fields["rule"]
	if expr == nil || expr.val.Kind != yaml.ScalarNode {
		return nil, fail(root.Line, errors.New("rule (the SpEL expression) is required and must be a string"))
	}
	translated, err := Expression(expr.val.Value)
	var ee *ExprError
	if errors.As(err, &ee) {
		return nil, fail(expr.key.Line, fmt.Errorf("SpEL expression, column %d: %s\n%s", ee.Pos+1, ee.Msg, ee.Snippet(expr.val.Value)))
	}
	if err != nil {
		return nil, fail(expr.key.Line, err)
	}
	match, err := pocMatch(fields["filter"])
	if err != nil {
		return nil, fail(fields["filter"].key.Line, err)
	}
	spec := &yaml.Node{Kind: yaml.MappingNode}
	add := func(k, v *yaml.Node) { spec.Content = append(spec.Content, k, v) }
	add(name.key, name.val)
	if f := fields["enabled"]; f != nil {
		add(f.key, f.val)
	}
	if f := fields["severity"]; f != nil {
		f.val.Value = strings.ToLower(f.val.Value)
		add(f.key, f.val)
	}
	add(str("mode"), strSeq(pocModes))
	add(match.key, match.val)
	ruleVal := str(translated)
	ruleVal.LineComment = expr.val.LineComment
	add(expr.key, ruleVal)
	if f := fields["alert"]; f != nil {
		add(f.key, f.val)
	}
	return spec, nil
}

// field is one key and value of a mapping.
type field struct{ key, val *yaml.Node }

// pocFieldsOf indexes a POC rule's fields, refusing unknown and repeated ones.
func pocFieldsOf(path string, root *yaml.Node) (map[string]*field, error) {
	fields := map[string]*field{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch {
		case !slices.Contains(pocFields, k.Value):
			return nil, &manifest.Error{Path: path, Line: k.Line, Err: fmt.Errorf("unknown POC rule field %q (a POC rule has %s)", k.Value, strings.Join(pocFields, ", "))}
		case fields[k.Value] != nil:
			return nil, &manifest.Error{Path: path, Line: k.Line, Err: fmt.Errorf("field %q is repeated", k.Value)}
		}
		fields[k.Value] = &field{k, v}
	}
	return fields, nil
}

// pocMatch builds match from the POC's filter: {namespace: [...]}.
func pocMatch(filter *field) (*field, error) {
	gvk := &yaml.Node{Kind: yaml.MappingNode}
	for _, kv := range podGVK {
		gvk.Content = append(gvk.Content, str(kv[0]), str(kv[1]))
	}
	out := &field{str("match"), mapping("gvk", &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{gvk}})}
	if filter == nil {
		return out, nil
	}
	out.key.HeadComment, out.key.LineComment, out.key.FootComment = filter.key.HeadComment, filter.key.LineComment, filter.key.FootComment
	include, err := pocNamespaces(filter.val)
	if err != nil {
		return nil, err
	}
	if include != nil && len(include.Content) > 0 {
		out.val.Content = append(out.val.Content, str("namespaces"), mapping("include", include))
	}
	return out, nil
}

// pocNamespaces reads filter.namespace: one name or a list of names.
func pocNamespaces(f *yaml.Node) (*yaml.Node, error) {
	if isNull(f) {
		return nil, nil
	}
	if f.Kind != yaml.MappingNode {
		return nil, errors.New("filter must be a mapping with a namespace list")
	}
	var include *yaml.Node
	for i := 0; i+1 < len(f.Content); i += 2 {
		k, v := f.Content[i], f.Content[i+1]
		if k.Value != "namespace" {
			return nil, fmt.Errorf("unknown filter field %q (the POC filtered on namespace only)", k.Value)
		}
		switch {
		case isNull(v):
		case v.Kind == yaml.ScalarNode:
			include = &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{v}}
		case v.Kind == yaml.SequenceNode:
			for _, n := range v.Content {
				if n.Kind != yaml.ScalarNode || isNull(n) {
					return nil, errors.New("filter.namespace entries must be namespace names")
				}
			}
			include = v
		default:
			return nil, errors.New("filter.namespace must be a namespace name or a list of them")
		}
	}
	return include, nil
}

// plainTo converts a plain rule to format.
func plainTo(spec *yaml.Node, format Format) (*yaml.Node, error) {
	if format == FormatFolder {
		return spec, nil
	}
	name := scalarValue(spec, "name")
	objName, err := ObjectName(name)
	if err != nil {
		return nil, err
	}
	return wrapCR(spec, objName), nil
}

// crTo converts a PortalClusterRule or PortalRule to format.
func crTo(root *yaml.Node, kind string, format Format) (*yaml.Node, error) {
	if format == FormatCR {
		return root, nil
	}
	meta := get(root, "metadata")
	if kind == "PortalRule" {
		return nil, fmt.Errorf("PortalRule %s/%s is namespaced and the folder format has no namespace: migrate it with --format=cr", scalarValue(meta, "namespace"), scalarValue(meta, "name"))
	}
	spec := get(root, "spec")
	if spec == nil || spec.Kind != yaml.MappingNode {
		return nil, errors.New("PortalClusterRule has no spec")
	}
	if get(spec, "name") == nil {
		spec.Content = append([]*yaml.Node{str("name"), str(scalarValue(meta, "name"))}, spec.Content...)
	}
	// The comment above the manifest describes the rule: keep it on top.
	if c := root.Content[0].HeadComment; c != "" {
		spec.Content[0].HeadComment = joinComments(c, spec.Content[0].HeadComment)
	}
	return spec, nil
}

// wrapCR wraps a plain rule in a PortalClusterRule manifest.
func wrapCR(spec *yaml.Node, name string) *yaml.Node {
	head := ""
	if len(spec.Content) > 0 {
		head, spec.Content[0].HeadComment = spec.Content[0].HeadComment, ""
	}
	apiKey := str("apiVersion")
	apiKey.HeadComment = head
	return &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		apiKey, str(apiVer),
		str("kind"), str("PortalClusterRule"),
		str("metadata"), mapping("name", str(name)),
		str("spec"), spec,
	}}
}

func joinComments(a, b string) string {
	if b == "" {
		return a
	}
	return a + "\n" + b
}

var notDNS = regexp.MustCompile(`[^a-z0-9]+`)

// ObjectName derives a Kubernetes object name (a DNS-1123 label) from a rule
// name: lower case, runs of other characters turned into single dashes, at
// most 63 characters.
func ObjectName(ruleName string) (string, error) {
	s := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(ruleName), "-"), "-")
	if len(s) > 63 {
		s = strings.TrimRight(s[:63], "-")
	}
	if s == "" {
		return "", fmt.Errorf("rule name %q yields no valid object name: give the rule a name with letters or digits", ruleName)
	}
	return s, nil
}

// check loads and compiles an output document as Portal would.
func check(eng *engine.Engine, path string, doc *yaml.Node) error {
	data, err := yaml.Marshal(doc)
	if err != nil {
		return &manifest.Error{Path: path, Line: doc.Line, Err: err}
	}
	r, err := rule.ParseDocument(manifest.Document{Path: path, Line: doc.Line, Data: data})
	if err != nil {
		return atLine(path, doc.Line, err)
	}
	if _, err := eng.Compile(r); err != nil {
		return &manifest.Error{Path: path, Line: doc.Line, Err: err}
	}
	return nil
}

// uniqueName refuses two manifests with the same metadata.name in one file:
// the second would silently replace the first on kubectl apply.
func uniqueName(path string, doc *yaml.Node, seen map[string]int) error {
	root := doc.Content[0]
	meta := get(root, "metadata")
	key := scalarValue(root, "kind") + " " + scalarValue(meta, "namespace") + "/" + scalarValue(meta, "name")
	if prev, ok := seen[key]; ok {
		return &manifest.Error{Path: path, Line: doc.Line, Err: fmt.Errorf("metadata.name %q is already used by the rule at line %d: rename one of the rules", scalarValue(meta, "name"), prev)}
	}
	seen[key] = doc.Line
	return nil
}

func encode(docs []*yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			return nil, err
		}
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ObjectNames lists the kind, namespace and name of every manifest in a
// migrated stream, as "Kind namespace/name", so callers can spot the same
// object written from two files.
func ObjectNames(data []byte) []string {
	docs, err := decode("", data)
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range docs {
		root := d.Content[0]
		if k := scalarValue(root, "kind"); k != "" {
			meta := get(root, "metadata")
			out = append(out, k+" "+scalarValue(meta, "namespace")+"/"+scalarValue(meta, "name"))
		}
	}
	return out
}

// atLine places the errors of a generated document at the input document it
// came from: their own lines and columns count in the generated text, which
// the user never sees.
func atLine(path string, line int, err error) error {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		if me, ok := errors.AsType[*manifest.Error](e); ok {
			e = me.Err
		}
		out[i] = &manifest.Error{Path: path, Line: line, Err: e}
	}
	return errors.Join(out...)
}
