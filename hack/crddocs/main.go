// Command crddocs writes the field tables of the custom resource reference
// (docs/reference/crd/<kind>.md) from the OpenAPI schemas of the generated CRD
// manifests in deploy/crds: the printer columns, and every spec and status
// field with its type, default, validation and description (the Go doc comment
// of the field in api/). The prose of each page stays hand-written; only the
// blocks between "<!-- generated:start columns|spec|status -->" and
// "<!-- generated:end ... -->" are written. `make docs-generate` writes them,
// `make docs` (-check) fails when a page is stale or a Portal CRD has no page.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/hack/internal/markers"
)

func main() {
	crds := flag.String("crds", "deploy/crds", "directory of the generated CRD manifests")
	docs := flag.String("docs", "docs/reference/crd", "directory of the reference pages, one <kind>.md per CRD")
	check := flag.Bool("check", false, "do not write: fail when a page differs from what would be written")
	flag.Parse()
	if err := run(*crds, *docs, *check); err != nil {
		fmt.Fprintln(os.Stderr, "crddocs:", err)
		os.Exit(1)
	}
}

// ownGroup reports whether a CRD is Portal's (and so must have a page), as
// opposed to one it installs for others (the PolicyReport CRDs).
func ownGroup(group string) bool {
	return group == "portal.io" || strings.HasSuffix(group, ".portal.io")
}

func run(crdDir, docsDir string, check bool) error {
	files, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil {
		return err
	}
	var errs []string
	for _, f := range files {
		crd, err := readCRD(f)
		if err != nil {
			return err
		}
		if !ownGroup(crd.Spec.Group) {
			continue
		}
		page := filepath.Join(docsDir, strings.ToLower(crd.Spec.Names.Kind)+".md")
		blocks, err := render(crd)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := markers.Update(page, blocks, check, "make docs-generate"); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

func readCRD(path string) (*apiextensionsv1.CustomResourceDefinition, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(src, &crd); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if crd.Kind != "CustomResourceDefinition" {
		return nil, fmt.Errorf("%s: kind %q, want CustomResourceDefinition", path, crd.Kind)
	}
	return &crd, nil
}

// render returns the columns, spec and status blocks of the CRD's storage
// version (Portal's CRDs have one version each).
func render(crd *apiextensionsv1.CustomResourceDefinition) ([]markers.Block, error) {
	var v *apiextensionsv1.CustomResourceDefinitionVersion
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Storage {
			v = &crd.Spec.Versions[i]
		}
	}
	if v == nil || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
		return nil, fmt.Errorf("no storage version with a schema")
	}
	root := v.Schema.OpenAPIV3Schema
	blocks := []markers.Block{{Name: "columns", Content: columns(v.AdditionalPrinterColumns)}}
	for _, part := range []string{"spec", "status"} {
		s, ok := root.Properties[part]
		if !ok {
			continue
		}
		blocks = append(blocks, markers.Block{Name: part, Content: fields(&s)})
	}
	return blocks, nil
}

func columns(cols []apiextensionsv1.CustomResourceColumnDefinition) []byte {
	var b strings.Builder
	wide := slices.ContainsFunc(cols, func(c apiextensionsv1.CustomResourceColumnDefinition) bool { return c.Priority > 0 })
	described := slices.ContainsFunc(cols, func(c apiextensionsv1.CustomResourceColumnDefinition) bool { return c.Description != "" })
	b.WriteString("| column | JSONPath | type |")
	sep := "|---|---|---|"
	if wide {
		b.WriteString(" shown |")
		sep += "---|"
	}
	if described {
		b.WriteString(" description |")
		sep += "---|"
	}
	b.WriteString("\n" + sep + "\n")
	for _, c := range cols {
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |", c.Name, cell(c.JSONPath), c.Type)
		if wide {
			shown := "always"
			if c.Priority > 0 {
				shown = "`-o wide`"
			}
			b.WriteString(" " + shown + " |")
		}
		if described {
			b.WriteString(" " + text(c.Description) + " |")
		}
		b.WriteString("\n")
	}
	return []byte(b.String())
}

// fields renders one table row per field under s, depth first, in name order.
func fields(s *apiextensionsv1.JSONSchemaProps) []byte {
	var b strings.Builder
	if len(s.Required) > 0 {
		fmt.Fprintf(&b, "Required: %s.\n\n", code(s.Required))
	}
	b.WriteString("| field | type | default | validation | description |\n|---|---|---|---|---|\n")
	walk(&b, s, "")
	return []byte(b.String())
}

func walk(b *strings.Builder, s *apiextensionsv1.JSONSchemaProps, prefix string) {
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		p := s.Properties[n]
		path := prefix + n
		var def string
		if p.Default != nil {
			def = "`" + cell(string(p.Default.Raw)) + "`"
		}
		rules := validation(&p)
		if slices.Contains(s.Required, n) {
			rules = append([]string{"**required**"}, rules...)
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s |\n", path, typeOf(&p), def, strings.Join(rules, "; "), text(p.Description))
		switch {
		case p.Type == "array" && p.Items != nil && p.Items.Schema != nil:
			walk(b, p.Items.Schema, path+"[].")
		case p.Type == "object" && p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil:
			walk(b, p.AdditionalProperties.Schema, path+".*.")
		default:
			walk(b, &p, path+".")
		}
	}
}

func typeOf(s *apiextensionsv1.JSONSchemaProps) string {
	switch {
	case s.XIntOrString:
		return "int or string"
	case s.Type == "array" && s.Items != nil && s.Items.Schema != nil:
		return "[]" + typeOf(s.Items.Schema)
	case s.Type == "object" && s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
		return "map[string]" + typeOf(s.AdditionalProperties.Schema)
	case s.Type == "object" && s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields:
		return "object (any fields)"
	case s.Format != "":
		return s.Type + " (" + s.Format + ")"
	case s.Type == "":
		return "any"
	}
	return s.Type
}

// validation lists what the API server checks of a field beyond its type.
func validation(s *apiextensionsv1.JSONSchemaProps) []string {
	var out []string
	if len(s.Enum) > 0 {
		out = append(out, "enum: "+enum(s.Enum))
	}
	num := func(name string, v *int64) {
		if v != nil {
			out = append(out, name+" "+strconv.FormatInt(*v, 10))
		}
	}
	num("minLength", s.MinLength)
	num("maxLength", s.MaxLength)
	num("minItems", s.MinItems)
	num("maxItems", s.MaxItems)
	num("minProperties", s.MinProperties)
	num("maxProperties", s.MaxProperties)
	if s.Minimum != nil {
		out = append(out, "minimum "+strconv.FormatFloat(*s.Minimum, 'g', -1, 64))
	}
	if s.Maximum != nil {
		out = append(out, "maximum "+strconv.FormatFloat(*s.Maximum, 'g', -1, 64))
	}
	if s.Pattern != "" {
		out = append(out, "pattern `"+cell(s.Pattern)+"`")
	}
	if s.XListType != nil {
		switch *s.XListType {
		case "set":
			out = append(out, "set")
		case "atomic":
			out = append(out, "atomic list")
		case "map":
			out = append(out, "map list keyed by "+code(s.XListMapKeys))
		}
	}
	if s.Type == "array" && s.Items != nil && s.Items.Schema != nil {
		for _, r := range validation(s.Items.Schema) {
			out = append(out, "items "+r)
		}
	}
	for _, r := range s.XValidations {
		msg := r.Message
		if msg == "" {
			msg = "`" + cell(r.Rule) + "`"
		}
		out = append(out, "rule: "+text(msg))
	}
	return out
}

func enum(vals []apiextensionsv1.JSON) string {
	out := make([]string, len(vals))
	for i, v := range vals {
		s := string(v.Raw)
		if u, err := strconv.Unquote(s); err == nil {
			s = u
		}
		out[i] = "`" + cell(s) + "`"
	}
	return strings.Join(out, ", ")
}

func code(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "`" + n + "`"
	}
	return strings.Join(out, ", ")
}

// text makes a description one table cell: one line, no pipes, no HTML.
func text(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.NewReplacer("<", "&lt;", ">", "&gt;").Replace(s)
	return cell(s)
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
