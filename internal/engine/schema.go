package engine

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/vilaca/portal/internal/context/event"
	"github.com/vilaca/portal/internal/context/pod"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/didyoumean"
)

// memberLister is implemented by programs that can list the field chains
// they read, so misspelt sugar fields fail at compile time.
type memberLister interface {
	Members() []core.Member
}

// schema is the shape of every name rules see. Only object.* (and the raw
// maps below labels, annotations, container.raw, pod.*) is open: everything
// else the context builders compute, so a field they do not compute is a
// typo that would read nil on every object.
var sugarSchema = func() map[string]*core.Schema {
	s := pod.Schema()
	s[event.Name] = event.Schema()
	return s
}()

// checkMembers rejects a field chain that leaves the schema, located at the
// first field that does not exist and naming the nearest one that does.
func checkMembers(p core.Program) error {
	ml, ok := p.(memberLister)
	if !ok {
		return nil
	}
	for _, m := range ml.Members() {
		s := sugarSchema[m.Path[0]]
		for i := 1; s != nil && !s.Open && i < len(m.Path); i++ {
			parent, name := strings.Join(m.Path[:i], "."), m.Path[i]
			if s.Fields == nil {
				return &core.CompileError{Offset: m.Offsets[i], Err: fmt.Errorf(
					"%s is a value, not a map: it has no field %q", parent, name)}
			}
			next, ok := s.Fields[name]
			if !ok {
				return &core.CompileError{Offset: m.Offsets[i], Err: unknownField(parent, name, s)}
			}
			s = next
		}
	}
	return nil
}

// resultTyper is implemented by programs that know, before any object is
// seen, what type their expression evaluates to.
type resultTyper interface {
	ResultType() string
	WholeMember() []string
}

// checkBoolean rejects a rule expression that cannot evaluate to a
// boolean: a literal, arithmetic, a string function, or a sugar field that
// is a string (rule: container.image.tag). Such a rule would load Ready and
// then report an error on every object it matches.
func checkBoolean(p core.Program) error {
	rt, ok := p.(resultTyper)
	if !ok {
		return nil
	}
	if path := rt.WholeMember(); path != nil {
		s := sugarSchema[path[0]]
		for _, name := range path[1:] {
			if s == nil || s.Open || s.Fields == nil {
				s = nil
				break
			}
			s = s.Fields[name]
		}
		if s != nil && s.Type != "" && s.Type != "a boolean" {
			field := strings.Join(path, ".")
			return fmt.Errorf("the rule must evaluate to a boolean (true flags the object), but %s is %s: compare it, as in %s", field, s.Type, comparison(field, s.Type))
		}
	}
	if t := rt.ResultType(); t != "" {
		return fmt.Errorf("the rule must evaluate to a boolean (true flags the object), but it is %s", t)
	}
	return nil
}

// comparison is a boolean expression over a field of type typ, for the
// hint of checkBoolean.
func comparison(field, typ string) string {
	switch typ {
	case "a number":
		return field + " > 0"
	case "a list":
		return `"value" in ` + field
	}
	return field + ` == "value"`
}

func unknownField(parent, name string, s *core.Schema) error {
	known := slices.Sorted(maps.Keys(s.Fields))
	hint := ""
	if parent == "container" || strings.HasPrefix(parent, "container.") || parent == "spec" || parent == "securityContext" || parent == "metadata" {
		hint = "; the object's own fields are under object.*"
		if parent == "container" || strings.HasPrefix(parent, "container.") {
			hint = "; the container's own fields are under container.raw.*"
		}
	}
	if d := didyoumean.Closest(name, known); d != "" {
		return fmt.Errorf("unknown field %s.%s: did you mean %s.%s? (%s has %s%s)", parent, name, parent, d, parent, strings.Join(known, ", "), hint)
	}
	return fmt.Errorf("unknown field %s.%s (%s has %s%s)", parent, name, parent, strings.Join(known, ", "), hint)
}
