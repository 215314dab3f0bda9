package migrate

import (
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/vilaca/portal/internal/manifest"
)

// Helpers over YAML node trees. The migrator works on nodes rather than Go
// values so comments survive and output styles are under its control.

// get returns the value of key in mapping m, or nil.
func get(m *yaml.Node, key string) *yaml.Node { return manifest.MapValue(m, key) }

// scalarValue returns the scalar at key in m, or "".
func scalarValue(m *yaml.Node, key string) string {
	if v := get(m, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

func strSeq(ss []string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode}
	for _, s := range ss {
		n.Content = append(n.Content, str(s))
	}
	return n
}

func mapping(key string, value *yaml.Node) *yaml.Node {
	return &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{str(key), value}}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "scalar"
	case yaml.AliasNode:
		return "alias"
	}
	return "document"
}

// canonical sets the output style of a rule document from its content alone,
// so that a document and its re-migration print identically whatever style
// the input used (block or flow, YAML or JSON):
//
//   - lists of scalars and mappings of scalars inside lists are flow style
//     ([audit], {group: "", version: v1, kind: Pod}), unless they carry
//     comments;
//   - everything else is block style;
//   - scalars are plain unless they need quotes, multi-line strings are
//     literal blocks, and the rule expression is always a literal block.
func canonical(root *yaml.Node) {
	style(root, false)
	spec := root
	if s := get(root, "spec"); s != nil && get(root, "apiVersion") != nil {
		spec = s
	}
	if r := get(spec, "rule"); r != nil && r.Kind == yaml.ScalarNode && r.Tag == "!!str" {
		r.Style = yaml.LiteralStyle
	}
}

func style(n *yaml.Node, inSeq bool) {
	switch n.Kind {
	case yaml.ScalarNode:
		n.Style = 0
		if n.Tag == "!!str" && strings.Contains(n.Value, "\n") {
			n.Style = yaml.LiteralStyle
		}
	case yaml.SequenceNode:
		n.Style = 0
		if allScalars(n.Content) {
			n.Style = yaml.FlowStyle
		}
		for _, c := range n.Content {
			style(c, true)
		}
	case yaml.MappingNode:
		n.Style = 0
		if inSeq && allScalars(n.Content) {
			n.Style = yaml.FlowStyle
		}
		for _, c := range n.Content {
			style(c, false)
		}
	}
}

func allScalars(nodes []*yaml.Node) bool {
	for _, c := range nodes {
		if c.Kind != yaml.ScalarNode || c.HeadComment != "" || c.LineComment != "" || c.FootComment != "" {
			return false
		}
	}
	return len(nodes) > 0
}
