package rule

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/manifest"
)

// ParseFile reads the rules in one file. A file holds any number of YAML
// documents, each a plain rule (the rule schema at the top level) or a
// PortalClusterRule or PortalRule manifest. Documents that fail are returned
// as errors located at their file and line; the others still load.
func ParseFile(path string, data []byte) ([]*core.Rule, []error) {
	var (
		rules []*core.Rule
		errs  []error
	)
	for _, d := range manifest.Split(path, data) {
		r, err := ParseDocument(d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rules = append(rules, r)
	}
	return rules, errs
}

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// ParseDocument reads one rule document.
func ParseDocument(d manifest.Document) (*core.Rule, error) {
	var tm typeMeta
	if err := yaml.Unmarshal(d.Data, &tm); err != nil {
		return nil, d.SyntaxError(err)
	}
	src := core.Source{Kind: "file", Path: d.Path, Line: d.Line}
	var (
		spec *policyv1alpha1.RuleSpec
		name string
		err  error
		ns   string
	)
	switch {
	case tm.APIVersion == "" && tm.Kind == "":
		spec = &policyv1alpha1.RuleSpec{}
		err = yaml.UnmarshalStrict(d.Data, spec)
	case tm.APIVersion == policyv1alpha1.GroupVersion.String() && tm.Kind == "PortalClusterRule":
		var o policyv1alpha1.PortalClusterRule
		err = yaml.UnmarshalStrict(d.Data, &o)
		spec, name = &o.Spec, o.Name
	case tm.APIVersion == policyv1alpha1.GroupVersion.String() && tm.Kind == "PortalRule":
		var o policyv1alpha1.PortalRule
		err = yaml.UnmarshalStrict(d.Data, &o)
		spec, name, ns = &o.Spec, o.Name, o.Namespace
		if err == nil && ns == "" {
			return nil, d.Errorf("PortalRule %q has no metadata.namespace: a PortalRule only matches objects in its own namespace", name)
		}
	default:
		return nil, d.Errorf("%s %s is not a rule: a rule file holds plain rules, PortalClusterRule or PortalRule (%s)", tm.APIVersion, tm.Kind, policyv1alpha1.GroupVersion)
	}
	if err != nil {
		return nil, locateDecodeError(d, err)
	}
	r, err := FromSpec(spec, name, src)
	if err != nil {
		return nil, d.Errorf("%v", err)
	}
	r.Namespace = ns
	return r, nil
}

var unknownField = regexp.MustCompile(`unknown field "([^"]+)"`)

// locateDecodeError points an unknown-field error at the line that holds the
// field, which is where the user has to look.
func locateDecodeError(d manifest.Document, err error) error {
	msg := manifest.YAMLError(err, d.Line)
	m := unknownField.FindStringSubmatch(msg)
	if m == nil {
		return d.Errorf("%s", msg)
	}
	field := m[1][strings.LastIndex(m[1], ".")+1:]
	key := regexp.MustCompile(`^\s*(-\s+)?` + regexp.QuoteMeta(field) + `\s*:`)
	line := d.Line
	for i, l := range bytes.Split(d.Data, []byte("\n")) {
		if key.Match(l) {
			line = d.Line + i
			break
		}
	}
	return &manifest.Error{Path: d.Path, Line: line, Err: fmt.Errorf("unknown field %q (check its spelling against docs/reference/rule-schema.md)", m[1])}
}
