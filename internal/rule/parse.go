package rule

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/yaml"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/manifest"
)

// ParseFile reads the rules in one file. A file holds any number of YAML
// documents, each a plain rule (the rule schema at the top level) or a
// PortalClusterRule or PortalRule manifest. Documents that fail are returned
// as errors located at the file, line and column of each problem; the others
// still load.
func ParseFile(path string, data []byte) ([]*core.Rule, []error) {
	parsed, errs := parseFile(path, data)
	rules := make([]*core.Rule, len(parsed))
	for i, p := range parsed {
		rules[i] = p.rule
	}
	return rules, errs
}

// parsed is a rule with the document it came from, so that compile errors
// can be located too.
type parsed struct {
	rule *core.Rule
	tree *tree
}

func parseFile(path string, data []byte) ([]parsed, []error) {
	var (
		out  []parsed
		errs []error
	)
	for _, d := range manifest.Split(path, data) {
		r, t, err := parseDocument(d)
		if err != nil {
			errs = append(errs, flatten(err)...)
			continue
		}
		out = append(out, parsed{rule: r, tree: t})
	}
	return out, errs
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// ParseDocument reads one rule document. Several problems are returned
// joined (errors.Join), each located at its field.
func ParseDocument(d manifest.Document) (*core.Rule, error) {
	r, _, err := parseDocument(d)
	return r, err
}

func parseDocument(d manifest.Document) (*core.Rule, *tree, error) {
	var tm typeMeta
	if err := yaml.Unmarshal(d.Data, &tm); err != nil {
		return nil, nil, d.SyntaxError(err)
	}
	t := newTree(d)
	src := core.Source{Kind: "file", Path: d.Path, Line: d.Line}
	var (
		spec *policyv1alpha1.RuleSpec
		name string
		ns   string
		into any
	)
	switch {
	case tm.APIVersion == "" && tm.Kind == "":
		spec = &policyv1alpha1.RuleSpec{}
		into = spec
	case tm.APIVersion == policyv1alpha1.GroupVersion.String() && tm.Kind == "PortalClusterRule":
		o := &policyv1alpha1.PortalClusterRule{}
		into, spec = o, &o.Spec
		t.withSpec()
	case tm.APIVersion == policyv1alpha1.GroupVersion.String() && tm.Kind == "PortalRule":
		o := &policyv1alpha1.PortalRule{}
		into, spec = o, &o.Spec
		t.withSpec()
	default:
		return nil, nil, d.Errorf("%s %s is not a rule: a rule file holds plain rules, PortalClusterRule or PortalRule (%s)", tm.APIVersion, tm.Kind, policyv1alpha1.GroupVersion)
	}
	// Every unknown field, each at its own line and column, before the
	// decoder stops at the first.
	if errs := t.unknownFields(t.root, reflect.TypeOf(into), ""); len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	if err := yaml.UnmarshalStrict(d.Data, into); err != nil {
		return nil, nil, t.decodeError(err)
	}
	if m, ok := into.(metav1.Object); ok {
		name, ns = m.GetName(), m.GetNamespace()
		if tm.Kind == "PortalRule" && ns == "" {
			return nil, nil, t.errorAt(value(t.root, "metadata"), fmt.Errorf("PortalRule %q has no metadata.namespace: a PortalRule only matches objects in its own namespace", name))
		}
	}
	r, err := FromSpec(spec, name, src)
	if err != nil {
		return nil, nil, errors.Join(t.locate(err)...)
	}
	r.Namespace = ns
	return r, t, nil
}

// goField finds the field path in a decoder's type error: "json: cannot
// unmarshal string into Go struct field RuleSpec.match.gvk of type []v1alpha1.GVK".
var goField = regexp.MustCompile(`Go struct field [A-Za-z0-9_]+\.(\S+) of type`)

// decodeError locates a decoder error (a value of the wrong type) at the
// field it names, and drops the decoders' prefixes.
func (t *tree) decodeError(err error) error {
	msg := manifest.YAMLError(err, t.doc.Line)
	m := goField.FindStringSubmatch(msg)
	if m == nil || t.root == nil {
		return t.doc.Errorf("%s", msg)
	}
	n := t.root
	for _, p := range pathPart.FindAllStringSubmatch(m[1], -1) {
		next := value(n, p[1])
		if p[2] != "" || next == nil {
			break
		}
		n = next
	}
	return t.errorAt(n, errors.New(msg))
}
