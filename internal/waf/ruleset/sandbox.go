package ruleset

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Kind classifies a Problem.
type Kind string

const (
	// KindInvalid: the rules are not valid SecLang, or name a data file
	// the bundle does not hold.
	KindInvalid Kind = "Invalid"
	// KindSandbox: a directive, operator or action reaches outside the
	// sandbox: host files, log files, programs, the process environment or
	// the network.
	KindSandbox Kind = "Sandbox"
	// KindTooLarge: the bundle, or a data file an operator reads, is larger
	// than the limits allow.
	KindTooLarge Kind = "TooLarge"
	// KindTimeout: the compile did not finish before its deadline.
	KindTimeout Kind = "Timeout"
)

// Problem is one thing wrong with a bundle.
type Problem struct {
	Kind Kind
	// Line is the bundle line (1-based) of the directive; 0 when the problem
	// is not in one directive.
	Line int
	// Source and SourceLine locate Line in the source it came from, when the
	// bundle has spans.
	Source     string
	SourceLine int
	// Directive is the directive's name as written in lower case ("secrule").
	Directive string
	Message   string
}

func (p Problem) String() string {
	var where string
	switch {
	case p.Source != "":
		where = fmt.Sprintf("RuleSource %q line %d: ", p.Source, p.SourceLine)
	case p.Line > 0:
		where = fmt.Sprintf("line %d: ", p.Line)
	}
	return where + p.Message
}

// forbiddenDirectives reach outside the sandbox whatever their argument.
var forbiddenDirectives = map[string]string{
	"secdebuglog":           "writes the engine's debug log to a host file or to the controller's output; data planes configure their own logging",
	"secauditlogstoragedir": "creates directories and files on the host",
	"secdatadir":            "names a host directory for persistent data",
	"secuploaddir":          "writes uploaded files to a host directory (and probes it at compile time)",
	"sectmpdir":             "names a host directory for temporary files",
	"secgsblookupdb":        "reads a host file",
	"secgeolookupdb":        "reads a host file",
	"secunicodemapfile":     "reads a host file",
	"secunicodemap":         "reads a host file",
	"secchrootdir":          "changes the process root directory",
	"secrulescript":         "runs a script",
	"secremoterules":        "downloads rules over the network",
}

// fileOperators read a data file named by their argument.
var fileOperators = map[string]bool{
	"pmfromfile": true, "pmf": true, "ipmatchfromfile": true, "ipmatchf": true, "validateschema": true,
}

// forbiddenOperators reach outside the sandbox.
var forbiddenOperators = map[string]string{
	"inspectfile": "runs a program on uploaded files",
	"rbl":         "queries DNS block lists over the network",
}

// forbiddenActions reach outside the sandbox.
var forbiddenActions = map[string]string{
	"setenv": "changes the environment of the data plane process",
	"exec":   "runs a program",
}

// analysis is what the pre-check learned about the rules besides problems.
type analysis struct {
	// operators lists every operator a rule uses, with the line of its rule.
	operators []operatorUse
	// removedIDs and removedTags are what SecRuleRemoveById/-ByTag remove.
	removedIDs  [][2]int
	removedTags []string
	// responseLimit is the SecResponseBodyLimit the rules end with.
	responseLimit responseLimit
}

type operatorUse struct {
	Name   string
	Line   int
	RuleID int
}

// checker runs the sandbox pre-check over a bundle's directives.
type checker struct {
	files    map[string][]byte
	crs      fs.FS
	problems []Problem
	analysis analysis
	// chainID is the id of the chain the next SecRule belongs to, if any.
	chainID int
	// maxDataFile bounds each data file a file operator reads.
	maxDataFile int
	// transforms bounds Coraza's transformation chain registry (chains.go).
	transforms transforms
	// includedCRS is set once a Core Rule Set file is included.
	includedCRS bool
}

// Check is the sandbox pre-check: it reports every directive, operator and
// action of b that reaches outside the sandbox, every data file or Include
// the sandbox cannot resolve, and lines Coraza would silently drop. The
// OWASP Core Rule Set files that b includes are Portal's own and are not
// checked. Check never compiles and never touches the filesystem.
func Check(b Bundle) []Problem {
	return CheckWith(b, Options{})
}

// CheckWith is Check with the limits of opts (MaxDataFileBytes), those the
// compile would apply.
func CheckWith(b Bundle, opts Options) []Problem {
	problems, _ := check(b, opts)
	return problems
}

func check(b Bundle, opts Options) ([]Problem, analysis) {
	dirs, problems := splitBundle(b)
	c := &checker{files: b.DataFiles, crs: crsFS, problems: problems, maxDataFile: opts.maxDataFile()}
	for _, d := range dirs {
		c.directive(d)
	}
	for i := range c.problems {
		c.problems[i].Source, c.problems[i].SourceLine = b.Locate(c.problems[i].Line)
	}
	return c.problems, c.analysis
}

func (c *checker) add(kind Kind, d directive, format string, args ...any) {
	c.problems = append(c.problems, Problem{Kind: kind, Line: d.Line, Directive: d.Name, Message: fmt.Sprintf(format, args...)})
}

func (c *checker) directive(d directive) {
	if why, ok := forbiddenDirectives[d.Name]; ok {
		c.add(KindSandbox, d, "%s is not allowed: it %s", d.Word, why)
		return
	}
	switch d.Name {
	case "include":
		c.include(d)
		c.includedCRS = true
		c.analysis.responseLimit.include(c.crs, d.Opts)
	case "secresponsebodylimit":
		c.analysis.responseLimit.note(d.Opts)
	// The arguments below are compared exactly as Coraza receives them: it
	// trims nothing, so " /dev/stdout" is a file name, not the console.
	case "secauditlog":
		if v := d.Opts; v != "/dev/stdout" && v != "/dev/stderr" {
			c.add(KindSandbox, d, "SecAuditLog %q is not allowed: only /dev/stdout and /dev/stderr, which open no file", v)
		}
	case "secauditlogtype":
		if v := d.Opts; !strings.EqualFold(v, "serial") {
			c.add(KindSandbox, d, "SecAuditLogType %q is not allowed: only Serial (Concurrent writes host files, HTTPS and Syslog reach the network)", v)
		}
	case "secignorerulecompilationerrors":
		if v := d.Opts; !strings.EqualFold(v, "off") {
			c.add(KindInvalid, d, "SecIgnoreRuleCompilationErrors %q is not allowed: broken rules would be dropped silently instead of reported", v)
		}
	case "secuploadkeepfiles":
		if v := d.Opts; !strings.EqualFold(v, "off") {
			c.add(KindSandbox, d, "SecUploadKeepFiles %q is not allowed: it writes uploaded files to the host", v)
		}
	case "secrule":
		_, op, acts, ok := ruleParts(d.Opts)
		if ok {
			list := actionsOf(acts)
			c.operator(d, op, c.ruleID(list))
			c.check(d, list)
			c.transformRule(d, list)
		}
	case "secaction":
		// seclang ParseRule: MaybeRemoveQuotes of the directive's argument.
		list := actionsOf(maybeUnquote(d.Opts))
		c.check(d, list)
		c.transformRule(d, list)
	case "secdefaultaction":
		// Kept as written and parsed with every later rule.
		c.check(d, actionsOf(d.Opts))
	case "secruleupdateactionbyid":
		list := actionsOf(updateActions(d.Opts))
		c.check(d, list)
		c.transformUpdate(d, list)
	case "secruleremovebyid":
		c.analysis.removedIDs = append(c.analysis.removedIDs, idRanges(d.Opts)...)
	case "secruleremovebytag":
		c.analysis.removedTags = append(c.analysis.removedTags, d.Opts)
	}
}

// updateActions returns the action list of SecRuleUpdateActionById as
// Coraza reads it (directiveSecRuleUpdateActionByID): the last field of the
// argument split on any whitespace, with double quotes trimmed from both
// ends. Everything before it is ids.
func updateActions(opts string) string {
	f := strings.Fields(opts)
	if len(f) < 2 {
		return ""
	}
	return strings.Trim(f[len(f)-1], `"`)
}

// include allows only files of the embedded Core Rule Set.
func (c *checker) include(d directive) {
	p := d.Opts
	switch {
	case p != strings.TrimSpace(p):
		// Coraza globs with the spaces but opens a plain path without them.
		c.add(KindInvalid, d, "Include %q: remove the spaces around the file name", p)
	case p == "":
		c.add(KindInvalid, d, "Include needs a file")
	case outside(p):
		c.add(KindSandbox, d, "Include %q reaches outside the sandbox: only files of the embedded OWASP Core Rule Set (@...) can be included", p)
	case !strings.HasPrefix(p, "@"):
		c.add(KindSandbox, d, "Include %q is not allowed: only files of the embedded OWASP Core Rule Set can be included (@coraza.conf-recommended, @crs-setup.conf.example, @owasp_crs/*.conf); RuleData files are data, not rules", p)
	case strings.Contains(p, "*"):
		if m, err := fs.Glob(c.crs, p); err != nil || len(m) == 0 {
			c.add(KindInvalid, d, "Include %q matches no file of the embedded OWASP Core Rule Set", p)
		}
	default:
		if _, err := fs.Stat(c.crs, p); err != nil {
			c.add(KindInvalid, d, "Include %q: no such file in the embedded OWASP Core Rule Set", p)
		}
	}
}

func (c *checker) operator(d directive, op string, id int) {
	name, arg := operatorOf(op)
	lname := strings.ToLower(name)
	c.analysis.operators = append(c.analysis.operators, operatorUse{Name: name, Line: d.Line, RuleID: id})
	if why, ok := forbiddenOperators[lname]; ok {
		c.add(KindSandbox, d, "operator @%s is not allowed: it %s", name, why)
		return
	}
	if !fileOperators[lname] {
		return
	}
	switch {
	case arg == "":
		c.add(KindInvalid, d, "operator @%s needs a file name", name)
	case outside(arg):
		c.add(KindSandbox, d, "operator @%s %q reaches outside the sandbox: name a file of the RuleSet's RuleData", name, arg)
	case strings.HasPrefix(arg, "@"):
		if _, err := fs.Stat(c.crs, arg); err != nil {
			c.add(KindInvalid, d, "operator @%s %q: no such file in the embedded OWASP Core Rule Set", name, arg)
		}
	default:
		data, ok := c.files[path.Clean(arg)]
		switch {
		case !ok:
			c.add(KindInvalid, d, "operator @%s %q: no such file in the RuleSet's RuleData (files: %s)", name, arg, fileList(c.files))
		case len(data) > c.maxDataFile:
			c.add(KindTooLarge, d, "operator @%s %q: the file is %d bytes; a file an operator reads may hold at most %d bytes (--waf-max-data-file-bytes): split it or trim it",
				name, arg, len(data), c.maxDataFile)
		}
	}
}

// ruleID returns the id of the SecRule with these actions: its own id, or
// the id of the chain it continues.
func (c *checker) ruleID(list []action) int {
	id, chained := 0, false
	for _, a := range list {
		switch a.Key {
		case "id":
			id, _ = strconv.Atoi(a.Value)
		case "chain":
			chained = true
		}
	}
	if id == 0 {
		id = c.chainID
	}
	c.chainID = 0
	if chained {
		c.chainID = id
	}
	return id
}

func (c *checker) check(d directive, list []action) {
	for _, a := range list {
		if why, ok := forbiddenActions[a.Key]; ok {
			c.add(KindSandbox, d, "action %s is not allowed: it %s", a.Key, why)
		}
	}
}

// outside reports a path that is absolute, climbs with "..", or is not a
// valid io/fs path once cleaned.
func outside(p string) bool {
	if strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`) || strings.Contains(p, `\`) {
		return true
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return true
		}
	}
	return !fs.ValidPath(path.Clean(p))
}

func fileList(files map[string][]byte) string {
	if len(files) == 0 {
		return "none"
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) > 10 {
		names = append(names[:10], "...")
	}
	return strings.Join(names, ", ")
}

// idRanges reads the ids and ranges of SecRuleRemoveById ("1 5-9 \"12\"").
func idRanges(opts string) [][2]int {
	var out [][2]int
	for _, f := range strings.Fields(opts) {
		f = maybeUnquote(f)
		lo, hi, isRange := strings.Cut(f, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				continue
			}
		}
		out = append(out, [2]int{a, b})
	}
	return out
}
