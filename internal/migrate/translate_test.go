package migrate

import (
	"strings"
	"testing"

	"github.com/expr-lang/expr"

	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

// translations covers every construct the migrator handles.
var translations = []struct{ spel, want string }{
	// Literals: strings are normalised to double quotes; SpEL doubles a quote
	// to escape it.
	{`container.name == 'app'`, `container.name == "app"`},
	{`container.name == "app"`, `container.name == "app"`},
	{`container.name == 'it''s'`, `container.name == "it's"`},
	{`container.name == "say ""hi"""`, `container.name == "say \"hi\""`},
	{`container.securityContext.runAsUser == 1000L`, `container.securityContext.runAsUser == 1000`},
	{`container.securityContext.runAsUser > -1`, `container.securityContext.runAsUser != nil and container.securityContext.runAsUser > -1`},
	{`object.spec.x == 1.5`, `object.spec.x == 1.5`},
	{`container.securityContext.privileged == TRUE`, `container.securityContext.privileged == true`},
	{`container.securityContext.runAsUser == null`, `container.securityContext.runAsUser == nil`},
	{`container.securityContext.runAsUser != NULL`, `container.securityContext.runAsUser != nil`},
	// Boolean operators keep the source's spelling.
	{`spec.hostPID == true and spec.hostIPC == true`, `spec.hostPID == true and spec.hostIPC == true`},
	{`spec.hostPID == true AND spec.hostIPC == true`, `spec.hostPID == true and spec.hostIPC == true`},
	{`spec.hostPID == true && spec.hostIPC == true || spec.hostNetwork == true`, `spec.hostPID == true && spec.hostIPC == true || spec.hostNetwork == true`},
	{`spec.hostPID == true and (spec.hostIPC == true or spec.hostNetwork == true)`, `spec.hostPID == true and (spec.hostIPC == true or spec.hostNetwork == true)`},
	{`!spec.hostPID`, `!spec.hostPID`},
	{`not spec.hostPID`, `not spec.hostPID`},
	{`!(spec.hostPID == true)`, `!(spec.hostPID == true)`},
	// Textual relational operators.
	{`metadata.name eq 'x' or metadata.name ne 'y'`, `metadata.name == "x" or metadata.name != "y"`},
	{`container.command.size() lt 2 and container.command.size() LE 2`, `len(container.command) < 2 and len(container.command) <= 2`},
	{`container.command.size() gt 2 or container.command.size() ge 2`, `len(container.command) > 2 or len(container.command) >= 2`},
	// Ordering comparisons keep SpEL's null-sorts-first rule explicitly.
	{`container.securityContext.runAsUser lt 1000`, `container.securityContext.runAsUser == nil or container.securityContext.runAsUser < 1000`},
	{`1000 > container.securityContext.runAsUser`, `container.securityContext.runAsUser == nil or 1000 > container.securityContext.runAsUser`},
	{`1000 <= container.securityContext.runAsUser`, `container.securityContext.runAsUser != nil and 1000 <= container.securityContext.runAsUser`},
	{`container.securityContext.runAsUser GE 1000 and metadata.name ne 'x'`, "(container.securityContext.runAsUser != nil and container.securityContext.runAsUser >= 1000)\nand metadata.name != \"x\""},
	{`container.securityContext.runAsUser eq 0 or container.securityContext.runAsUser le 0 or container.securityContext.runAsUser gt 0`, "container.securityContext.runAsUser == 0\nor (container.securityContext.runAsUser == nil or container.securityContext.runAsUser <= 0)\nor (container.securityContext.runAsUser != nil and container.securityContext.runAsUser > 0)"},
	{`container.securityContext.runAsUser < securityContext.runAsUser`, `container.securityContext.runAsUser == nil or securityContext.runAsUser == nil ? container.securityContext.runAsUser == nil and securityContext.runAsUser != nil : container.securityContext.runAsUser < securityContext.runAsUser`},
	// Set literals and contains.
	{`{'a','b'}.contains(container.name)`, `container.name in ["a", "b"]`},
	{`!{'a','b'}.contains(container.name)`, `container.name not in ["a", "b"]`},
	{`not {'a'}.contains(container.name)`, `container.name not in ["a"]`},
	{`{}.contains(container.name)`, `container.name in []`},
	{`container.command.contains('sh')`, `"sh" in container.command`},
	{`container.image.name.contains('nginx')`, `container.image.name contains "nginx"`},
	{`!container.image.name.contains('nginx')`, `container.image.name not contains "nginx"`},
	{`object.spec.foo.contains('x')`, `type(object.spec.foo) == "string" ? object.spec.foo contains "x" : "x" in object.spec.foo`},
	{`metadata.labels.containsKey('app')`, `"app" in metadata.labels`},
	// Strings.
	{`container.image.registry.startsWith('ghcr.')`, `container.image.registry startsWith "ghcr."`},
	{`!container.image.registry.endsWith('.example.com')`, `container.image.registry not endsWith ".example.com"`},
	{`container.image.tag matches 'v[0-9]+'`, `container.image.tag matches "^(?:v[0-9]+)$"`},
	{`container.image.registry matches '.*\.example\.com'`, "container.image.registry matches `^(?:.*\\.example\\.com)$`"},
	{`!(container.image.tag matches 'v.*')`, `container.image.tag not matches "^(?:v.*)$"`},
	{`container.image.tag.matches('v.*')`, `container.image.tag matches "^(?:v.*)$"`},
	{`container.name.toLowerCase() == 'app'`, `lower(container.name) == "app"`},
	{`container.name.toUpperCase() == 'APP'`, `upper(container.name) == "APP"`},
	{`container.name.length() > 3`, `len(container.name) > 3`},
	// Collections.
	{`container.command.size() > 2`, `len(container.command) > 2`},
	{`container.command.isEmpty()`, `len(container.command) == 0`},
	{`!container.args.isEmpty()`, `!(len(container.args) == 0)`},
	{`object.spec.volumes?.size() > 0`, `(object.spec.volumes == nil ? nil : len(object.spec.volumes)) != nil and (object.spec.volumes == nil ? nil : len(object.spec.volumes)) > 0`},
	{`container.command[0] == 'sh'`, `container.command[0] == "sh"`},
	{`metadata.labels['app.kubernetes.io/name'] == 'x'`, `metadata.labels["app.kubernetes.io/name"] == "x"`},
	{`metadata.labels['app.kubernetes.io/name'].contains('x')`, `metadata.labels["app.kubernetes.io/name"] contains "x"`},
	{`metadata.annotations.owner.startsWith('team-')`, `metadata.annotations.owner startsWith "team-"`},
	// Null safety.
	{`object.spec?.securityContext?.runAsUser == 0`, `object.spec?.securityContext?.runAsUser == 0`},
	{`container.securityContext.runAsUser ?: 0`, `container.securityContext.runAsUser ?? 0`},
	{`(container.securityContext.runAsUser ?: securityContext.runAsUser ?: 0) == 0`, `(container.securityContext.runAsUser ?? securityContext.runAsUser ?? 0) == 0`},
	{`(container.securityContext.runAsNonRoot ?: false) == false`, `(container.securityContext.runAsNonRoot ?? false) == false`},
	{`(metadata.labels['team'] ?: 'none') == 'none'`, `((metadata.labels["team"] ?? "") != "" ? metadata.labels["team"] : "none") == "none"`},
	{`(object.spec.x ?: 1) == 1`, `((object.spec.x ?? "") != "" ? object.spec.x : 1) == 1`},
	// Ternary.
	{`spec.hostNetwork == true ? container.name != 'agent' : false`, `spec.hostNetwork == true ? container.name != "agent" : false`},
	// Names that are not plain identifiers are indexed.
	{`object.metadata.$weird == 1`, `object.metadata["$weird"] == 1`},
	{`object.metadata?.$weird == 1`, `object.metadata?.["$weird"] == 1`},
}

func TestTranslate(t *testing.T) {
	for _, tt := range translations {
		got, err := Expression(tt.spel)
		if err != nil {
			t.Errorf("%s: %v", tt.spel, err)
			continue
		}
		if got != tt.want {
			t.Errorf("%s:\n got: %s\nwant: %s", tt.spel, got, tt.want)
		}
		if _, err := ruleCompiler().Compile(got); err != nil {
			t.Errorf("%s: translation %q does not compile: %v", tt.spel, got, err)
		}
	}
}

// refusals are constructs with no translation: each error must name it.
var refusals = []struct{ spel, want string }{
	{`T(java.lang.Math).random() > 0.5`, "column 1: type reference T(java.lang.Math) has no expr-lang translation"},
	{`container.name == T(String).valueOf(1)`, "type reference T(String)"},
	{`new java.util.ArrayList().isEmpty()`, "constructor call"},
	{`#root.container == null`, "variable reference #root"},
	{`#this.name == 'x'`, "variable reference #this"},
	{`@registry.allowed(container.image.registry)`, "bean reference @registry"},
	{`container.name = 'x'`, "assignment (=)"},
	{`container.securityContext.runAsUser + 1 > 0`, "arithmetic (+)"},
	{`container.securityContext.runAsUser div 2 > 0`, "arithmetic (div)"},
	{`container.ports.?[containerPort == 80].size() > 0`, "collection selection (.?[...])"},
	{`container.ports.![containerPort].contains(80)`, "collection projection (.![...])"},
	{`container.ports.^[containerPort == 80] != null`, "first-match selection"},
	{`container.name instanceof T(String)`, "instanceof"},
	{`container.securityContext.runAsUser between {1, 10}`, "between"},
	{`container.name.substring(1) == 'x'`, "method call .substring() has no expr-lang translation"},
	{`isPrivileged(container)`, "function call isPrivileged(...) on the root context"},
	{`{'a': 1}.containsKey('a')`, "inline map"},
	{`pod2.name == 'x'`, `unknown name "pod2"`},
	{`container.image.tag matches container.name`, "matches needs a string literal pattern"},
	{`container.image.tag matches '(?=x)y'`, "not valid in Go's RE2 syntax"},
	{`container.securityContext.privileged.contains('x')`, "contains() called on a boolean"},
	{`metadata.labels.contains('x')`, "use containsKey()"},
	{`container.command.startsWith('x')`, "startsWith() called on a list"},
	{`container.name.contains()`, "contains() takes 1 argument(s), got 0"},
	{`container.name == 'x`, "unterminated string literal"},
	{`container.name ==`, "unexpected the end of the expression"},
	{`(container.name == 'x'`, `expected ")"`},
	{`container.name == 'x' 'y'`, "unexpected string 'y' after the end"},
	{`a == b == c`, "unexpected '==' after the end"},
	{`0x1F == 1`, "hexadecimal literal"},
	{`1.5f == 1`, "float/double suffixes"},
	{`container.name?.[0] == 'x'`, "null-safe indexing"},
	{`-container.securityContext.runAsUser < 0`, "unary minus is only supported on number literals"},
	{``, "expression is empty"},
	{`container.name == 'x' and`, "unexpected the end of the expression"},
	{`container..name`, "expected a property or method name"},
	{`container.name ~ 'x'`, `unexpected character '~'`},
	{"container.name == '\xff'", "not valid UTF-8"},
	{strings.Repeat("(", 200) + "true" + strings.Repeat(")", 200), "nests more than 100 levels"},
}

func TestRefusals(t *testing.T) {
	for _, tt := range refusals {
		got, err := Expression(tt.spel)
		if err == nil {
			t.Errorf("%s: translated to %q, want an error containing %q", tt.spel, got, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s:\n got error: %v\nwant it to contain: %s", tt.spel, err, tt.want)
		}
	}
}

func TestQuoteRoundTrips(t *testing.T) {
	for _, s := range []string{"", "plain", `it's`, `say "hi"`, `a\d+`, "tab\there", "new\nline", "back`tick\\", "\x00\x7f", "héllo ☃", `\`} {
		q := Quote(s)
		got, err := expr.Eval(q, nil)
		if err != nil {
			t.Errorf("Quote(%q) = %s: %v", s, q, err)
			continue
		}
		if got != s {
			t.Errorf("Quote(%q) = %s evaluates to %q", s, q, got)
		}
	}
}

// ruleCompiler compiles as rules do: with the names the rule engine
// declares.
func ruleCompiler() *exprlang.Engine {
	return exprlang.New(exprlang.WithNames(engine.New(exprlang.New()).Names()...))
}
