// Package ruletest runs rule test files (portal-test.yaml): each names rules,
// the resources to evaluate them on, optional exceptions and cluster state,
// and the result each rule must give on each resource. It is the engine
// behind `portal test`, the rules' unit tests in CI.
package ruletest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/didyoumean"
	"github.com/vilaca/portal/internal/manifest"
)

// FileName is the name `portal test` looks for under the directories it is
// given. Rule and manifest directories skip it (manifest.Files), so a test
// file may sit beside the rules it tests.
const FileName = manifest.TestFileName

// Bounds on one test file: a test file is input like any manifest, and a
// generated or hostile one must fail with a message, not exhaust memory.
const (
	// MaxFileBytes bounds the size of a test file.
	MaxFileBytes = 1 << 20
	// MaxResults bounds the expectations of one test file.
	MaxResults = 10000
	// MaxPaths bounds the paths one list (rules, resources, exceptions,
	// clusterState) names.
	MaxPaths = 1000
)

// The results an expectation may name: the engine's outcomes, and warn for
// the failure of a rule whose enforcementAction is warn.
const (
	ResultPass  = string(core.OutcomePass)
	ResultFail  = string(core.OutcomeFail)
	ResultWarn  = string(core.ActionWarn)
	ResultSkip  = string(core.OutcomeSkip)
	ResultError = string(core.OutcomeError)
)

// Results lists the values of an expectation's result field.
var Results = []string{ResultPass, ResultFail, ResultWarn, ResultSkip, ResultError}

// File is one parsed test file. Paths are as written; Resolve makes them
// relative to the file.
type File struct {
	// Path is where the file was read from.
	Path string `yaml:"-"`
	// Name describes the test; the file's path when empty.
	Name string `yaml:"name"`
	// Rules are rule files or directories.
	Rules []string `yaml:"rules"`
	// Resources are what the rules are evaluated on: manifest files or
	// directories, or objects written inline.
	Resources []Resource `yaml:"resources"`
	// Exceptions are PortalException and PortalClusterException manifests,
	// applied as portal eval --exceptions applies them.
	Exceptions []string `yaml:"exceptions"`
	// ClusterState are manifests cross-resource lookups read, as portal eval
	// --cluster-state.
	ClusterState []string `yaml:"clusterState"`
	// Events are recorded API server audit logs (JSON lines) replayed
	// through the rules of mode runtime, as portal eval --events does.
	Events []string `yaml:"events"`
	// Mode, when set, runs only the rules of that mode (admission or audit).
	Mode string `yaml:"mode"`
	// Now is the time exceptions' expires is compared with; the current time
	// when unset, so a test of an expiring exception sets it.
	Now *time.Time `yaml:"now"`
	// Results are the expectations.
	Results []Expectation `yaml:"results"`
}

// Resource is one entry of a test's resources: a path, or an inline object.
type Resource struct {
	// Path is a manifest file or directory; empty for an inline object.
	Path string
	// Inline is the YAML of an object written in the test file, and Line
	// where it starts there.
	Inline []byte
	Line   int
}

// UnmarshalYAML reads a path (a string) or an inline object (a mapping).
func (r *Resource) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		return n.Decode(&r.Path)
	case yaml.MappingNode:
		b, err := yaml.Marshal(n)
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		r.Inline, r.Line = b, n.Line
		return nil
	}
	return fmt.Errorf("line %d: a resource is a manifest path or an object written inline", n.Line)
}

// paths returns the resources that are paths.
func paths(rs []Resource) []string {
	var out []string
	for _, r := range rs {
		if r.Inline == nil {
			out = append(out, r.Path)
		}
	}
	return out
}

// Expectation is one expected result.
type Expectation struct {
	Rule      string `yaml:"rule"`
	Resource  string `yaml:"resource"`
	Container string `yaml:"container"`
	Result    string `yaml:"result"`
	// Message, when set, must be a substring of the result's message.
	Message string `yaml:"message"`
	// Line is where the expectation starts in the file.
	Line int `yaml:"-"`
}

// Title is the test's name, or its path when it has none.
func (f *File) Title() string {
	if f.Name != "" {
		return f.Name
	}
	return f.Path
}

var (
	fileFields        = []string{"name", "rules", "resources", "exceptions", "clusterState", "events", "mode", "now", "results"}
	expectationFields = []string{"rule", "resource", "container", "result", "message"}
)

// Parse reads a test file. Every problem is an error located at its line
// (a *manifest.Error): a field the schema does not have, a value of the
// wrong type, a missing rule, resource or result, a result that is not one
// of Results, a resource that is not Kind/name or Kind/namespace/name, more
// than one YAML document.
func Parse(path string, data []byte) (*File, error) {
	at := func(line int, err error) error { return &manifest.Error{Path: path, Line: line, Err: err} }
	if len(data) > MaxFileBytes {
		return nil, at(0, errors.New(tooBig(int64(len(data)))))
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, at(0, errors.New("the file is empty"))
		}
		return nil, at(0, fmt.Errorf("not valid YAML: %w", err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, at(extra.Line, errors.New("a test file holds one YAML document: split the tests into files of their own"))
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind != yaml.MappingNode {
		return nil, at(doc.Line, errors.New("a test file is a mapping of name, rules, resources and results"))
	}
	// Before anything decodes it: yaml.v3 expands an alias wherever it is
	// used, and its alias ratio check misses a big anchor used many times
	// in a big enough file.
	if err := noAliases(&root, at); err != nil {
		return nil, err
	}
	if err := checkFields(doc, fileFields, at); err != nil {
		return nil, err
	}
	f := &File{Path: path}
	if err := doc.Decode(f); err != nil {
		return nil, at(0, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  ")))
	}
	if err := f.check(doc, at); err != nil {
		return nil, err
	}
	return f, nil
}

// noAliases refuses any anchor or alias in the tree at n: a test file has
// no use for them, and an alias is a copy the file does not pay for.
func noAliases(n *yaml.Node, at func(int, error) error) error {
	stack := []*yaml.Node{n}
	for len(stack) > 0 {
		n, stack = stack[len(stack)-1], stack[:len(stack)-1]
		if n.Kind == yaml.AliasNode || n.Anchor != "" {
			return at(n.Line, errors.New("anchors and aliases are not allowed in test files: write each value out"))
		}
		// Reversed, so the first in the file is the one reported.
		for i := len(n.Content) - 1; i >= 0; i-- {
			stack = append(stack, n.Content[i])
		}
	}
	return nil
}

// checkFields refuses a key of m that is not in known, naming the closest
// known one: a misspelt optional field would otherwise be a test that
// silently asserts less than it says.
func checkFields(m *yaml.Node, known []string, at func(int, error) error) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if slices.Contains(known, k.Value) {
			continue
		}
		msg := fmt.Sprintf("unknown field %q", k.Value)
		if s := didyoumean.Closest(k.Value, known); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return at(k.Line, fmt.Errorf("%s; the fields are %s", msg, strings.Join(known, ", ")))
	}
	return nil
}

// field returns the value of key in the mapping m, or nil.
func field(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// check validates what the types alone do not, and records each
// expectation's line.
func (f *File) check(doc *yaml.Node, at func(int, error) error) error {
	lists := []struct {
		key  string
		list []string
	}{{"rules", f.Rules}, {"exceptions", f.Exceptions}, {"clusterState", f.ClusterState}, {"events", f.Events}}
	if len(f.Resources) > MaxPaths {
		return at(field(doc, "resources").Line, fmt.Errorf("resources names %d paths and objects, over the %d a test file may", len(f.Resources), MaxPaths))
	}
	inline := 0
	for i, r := range f.Resources {
		inline += len(r.Inline)
		if r.Inline != nil {
			continue
		}
		if err := checkPath(r.Path); err != nil {
			return at(field(doc, "resources").Content[i].Line, fmt.Errorf("resources: %w", err))
		}
	}
	if inline > MaxFileBytes {
		return at(field(doc, "resources").Line, fmt.Errorf("resources: the inline objects are %d bytes, over the %d a test file may have", inline, MaxFileBytes))
	}
	for _, l := range lists {
		key, list := l.key, l.list
		if len(list) > MaxPaths {
			return at(field(doc, key).Line, fmt.Errorf("%s names %d paths, over the %d a test file may", key, len(list), MaxPaths))
		}
		for i, p := range list {
			if err := checkPath(p); err != nil {
				return at(field(doc, key).Content[i].Line, fmt.Errorf("%s: %w", key, err))
			}
		}
	}
	if err := checkText("name", f.Name, maxTextBytes); err != nil {
		return at(field(doc, "name").Line, err)
	}
	switch {
	case len(f.Rules) == 0:
		return at(doc.Line, errors.New("rules: name at least one rule file or directory"))
	case len(f.Resources) == 0:
		return at(doc.Line, errors.New("resources: name at least one manifest file or directory, or write an object inline"))
	case len(f.Results) == 0:
		return at(doc.Line, errors.New("results: a test file asserts at least one result"))
	case len(f.Results) > MaxResults:
		return at(field(doc, "results").Line, fmt.Errorf("results holds %d expectations, over the %d a test file may", len(f.Results), MaxResults))
	}
	if f.Mode != "" && f.Mode != string(core.ModeAdmission) && f.Mode != string(core.ModeAudit) {
		return at(field(doc, "mode").Line, fmt.Errorf("mode %q: use admission or audit, or leave it out to run every rule", f.Mode))
	}
	items := field(doc, "results").Content
	for i := range f.Results {
		n := items[i]
		if n.Kind != yaml.MappingNode {
			return at(n.Line, errors.New("an expectation is a mapping of rule, resource and result"))
		}
		if err := checkFields(n, expectationFields, at); err != nil {
			return err
		}
		e := &f.Results[i]
		e.Line = n.Line
		if err := e.check(); err != nil {
			return at(n.Line, err)
		}
	}
	return nil
}

func (e *Expectation) check() error {
	switch {
	case e.Rule == "":
		return errors.New("rule: name the rule this result is of")
	case checkText("rule", e.Rule, maxNameBytes) != nil:
		return checkText("rule", e.Rule, maxNameBytes)
	case e.Container != "" && len(validation.IsDNS1123Label(e.Container)) > 0:
		return fmt.Errorf("container %q: a container name is a DNS label (%s)", e.Container, strings.Join(validation.IsDNS1123Label(e.Container), "; "))
	case checkText("message", e.Message, maxTextBytes) != nil:
		return checkText("message", e.Message, maxTextBytes)
	case e.Resource == "":
		return errors.New("resource: name the object as Kind/namespace/name (Kind/name when cluster-scoped)")
	case !slices.Contains(Results, e.Result):
		return fmt.Errorf("result %q: use one of %s", e.Result, strings.Join(Results, ", "))
	}
	_, err := ParseResource(e.Resource)
	return err
}

// ResourceID names an object as an expectation does.
type ResourceID struct{ Kind, Namespace, Name string }

func (r ResourceID) String() string {
	if r.Namespace == "" {
		return r.Kind + "/" + r.Name
	}
	return r.Kind + "/" + r.Namespace + "/" + r.Name
}

// ParseResource reads Kind/namespace/name or Kind/name: a Kind of letters
// and digits, a namespace that is a DNS label, and a name of printable
// characters (object names such as system:node allow more than a DNS
// subdomain) of at most 253 bytes.
func ParseResource(s string) (ResourceID, error) {
	parts := strings.Split(s, "/")
	if slices.Contains(parts, "") || len(parts) < 2 || len(parts) > 3 {
		return ResourceID{}, fmt.Errorf("resource %q: write Kind/namespace/name, or Kind/name for a cluster-scoped object", s)
	}
	if len(parts[0]) > 63 || !kindPattern.MatchString(parts[0]) {
		return ResourceID{}, fmt.Errorf("resource %q: the Kind %q is not a kind: at most 63 letters and digits, starting with a letter", s, parts[0])
	}
	if len(parts) == 3 && len(validation.IsDNS1123Label(parts[1])) > 0 {
		return ResourceID{}, fmt.Errorf("resource %q: the namespace %q is not a DNS label", s, parts[1])
	}
	if err := checkText("resource name", parts[len(parts)-1], maxNameBytes); err != nil {
		return ResourceID{}, fmt.Errorf("resource %q: %w", s, err)
	}
	if len(parts) == 2 {
		return ResourceID{Kind: parts[0], Name: parts[1]}, nil
	}
	return ResourceID{Kind: parts[0], Namespace: parts[1], Name: parts[2]}, nil
}

// Bounds on the text of a test file that reports print.
const (
	// maxNameBytes bounds a rule's and an object's name (a DNS subdomain's
	// length).
	maxNameBytes = 253
	// maxTextBytes bounds a test's name and an expected message.
	maxTextBytes = 1024
)

// kindPattern is a kind of at most 63 bytes (checked apart: a counted
// repetition compiles to a copy of the class per count).
var kindPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)

// checkText refuses text a report would print that holds a character that
// is not printable (a newline, an escape sequence, a bidirectional
// override): in a CI log it could forge a line, a workflow command or
// colours.
func checkText(what, s string, limit int) error {
	if len(s) > limit {
		return fmt.Errorf("%s is %d bytes, over the %d it may have", what, len(s), limit)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) || r == unicode.ReplacementChar }) {
		return fmt.Errorf("%s %q holds a character that is not printable", what, s)
	}
	return nil
}

// checkPath refuses a path a test could not read safely: empty, absolute,
// or too long. Where a relative one leads is checked when the test runs,
// after links.
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("an empty path")
	case len(p) > MaxPathBytes:
		return fmt.Errorf("a path of %d bytes, over the %d a path may have", len(p), MaxPathBytes)
	case filepath.IsAbs(p) || strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q is absolute: a path in a test file is relative to it and stays under the directory portal test was given", p)
	}
	return nil
}
