package ruleset

// This file makes the capabilities the sandbox forbids impossible inside
// Coraza itself, whatever the pre-check (Check) lets through: it replaces,
// through Coraza's plugin registry, every action, operator and audit log
// writer that touches the process or the disk, and it stops the parser
// before it runs a forbidden directive (Coraza v3.8.1 has no directive
// registry). The registry is process-wide, so the controller and the
// waf-proxy, which both import this package, run the same engine.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/corazawaf/coraza/v3/debuglog"
	"github.com/corazawaf/coraza/v3/experimental/plugins"
	"github.com/corazawaf/coraza/v3/experimental/plugins/plugintypes"

	// @pm, @pmFromFile and @pmf on a faster automaton (registered by its
	// init).
	_ "github.com/vilaca/portal/internal/waf/pm"
	_ "github.com/vilaca/portal/internal/waf/transform"
	// @rx on RE2 (registered by its init): the data plane's regexes run in
	// linear time, each within rx.MaxMemory.
	_ "github.com/vilaca/portal/internal/waf/rx"
)

// refusal starts every error the engine's replacements return, so Compile
// reports them as sandbox violations.
const refusal = "not allowed in Portal's WAF sandbox: "

func init() {
	for name, why := range forbiddenActions {
		plugins.RegisterAction(name, func() plugintypes.Action { return refusedAction{name: name, why: why} })
	}
	// initcol opens a persistent collection. Coraza v3.8.1 accepts it and
	// does nothing, and the Core Rule Set uses it, so it stays accepted;
	// the replacement guarantees it never persists anything.
	plugins.RegisterAction("initcol", func() plugintypes.Action { return inertCollection{} })
	for name, why := range forbiddenOperators {
		plugins.RegisterOperator(engineOperatorName(name), func(plugintypes.OperatorOptions) (plugintypes.Operator, error) {
			return nil, fmt.Errorf("operator @%s is %s%s", engineOperatorName(name), refusal, why)
		})
	}
	plugins.RegisterAuditLogWriter("serial", func() plugintypes.AuditLogWriter { return &consoleWriter{} })
	for _, name := range []string{"concurrent", "https", "syslog"} {
		plugins.RegisterAuditLogWriter(name, func() plugintypes.AuditLogWriter { return refusedWriter{name: name} })
	}
}

// engineOperatorName is the case Coraza registers an operator under.
func engineOperatorName(lower string) string {
	switch lower {
	case "inspectfile":
		return "inspectFile"
	default:
		return lower
	}
}

// refusedAction fails to initialise, so a rule using it does not compile,
// and does nothing if it ever runs.
type refusedAction struct{ name, why string }

func (a refusedAction) Init(plugintypes.RuleMetadata, string) error {
	return fmt.Errorf("action %s is %sit %s", a.name, refusal, a.why)
}
func (refusedAction) Evaluate(plugintypes.RuleMetadata, plugintypes.TransactionState) {}
func (refusedAction) Type() plugintypes.ActionType                                    { return plugintypes.ActionTypeNondisruptive }

// inertCollection accepts initcol's syntax and persists nothing.
type inertCollection struct{}

func (inertCollection) Init(_ plugintypes.RuleMetadata, data string) error {
	if _, _, ok := strings.Cut(data, "="); !ok {
		return errors.New("invalid arguments, expected syntax {action}:{key}={value}")
	}
	return nil
}
func (inertCollection) Evaluate(plugintypes.RuleMetadata, plugintypes.TransactionState) {}
func (inertCollection) Type() plugintypes.ActionType                                    { return plugintypes.ActionTypeNondisruptive }

// consoleWriter is the serial audit log writer restricted to the console:
// no target, /dev/stdout or /dev/stderr. Coraza initialises the writer when
// the WAF is created, so any other target fails the compile before a file
// is opened.
type consoleWriter struct {
	w         io.Writer
	formatter plugintypes.AuditLogFormatter
	// mu keeps concurrent transactions' entries whole, as the log.Logger
	// of Coraza's own serial writer does.
	mu sync.Mutex
}

func (c *consoleWriter) Init(cfg plugintypes.AuditLogConfig) error {
	switch cfg.Target {
	case "":
		return nil
	case "/dev/stdout":
		c.w = os.Stdout
	case "/dev/stderr":
		c.w = os.Stderr
	default:
		return fmt.Errorf("audit log %q is %sonly /dev/stdout and /dev/stderr", cfg.Target, refusal)
	}
	c.formatter = cfg.Formatter
	return nil
}

func (c *consoleWriter) Write(al plugintypes.AuditLog) error {
	if c.w == nil || c.formatter == nil {
		return nil
	}
	b, err := c.formatter.Format(al)
	if err != nil || len(b) == 0 {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err = c.w.Write(append(b, '\n'))
	return err
}

func (*consoleWriter) Close() error { return nil }

// refusedWriter replaces the audit log writers that write host files or
// reach the network.
type refusedWriter struct{ name string }

func (w refusedWriter) Init(plugintypes.AuditLogConfig) error {
	return fmt.Errorf("audit log type %s is %sonly Serial to /dev/stdout or /dev/stderr", w.name, refusal)
}
func (refusedWriter) Write(plugintypes.AuditLog) error { return nil }
func (refusedWriter) Close() error                     { return nil }

// guard is the debug logger of every WAF Compile creates. Coraza logs each
// logical line at debug level ("Parsing directive") before it runs the
// directive; while the WAF is being compiled the guard records those lines
// and, for a directive the sandbox forbids, panics with a *forbiddenDirective
// that Compile recovers, so the directive never runs. After the compile it
// logs nothing, at no cost.
type guard struct {
	compiling atomic.Bool
	// record, when set, receives every directive line Coraza evaluates
	// (the differential fuzz test reads them).
	record func(line string)
	// parsed counts the bytes of the lines Coraza evaluated, included files
	// too. Coraza parses in one goroutine.
	parsed int64
}

// forbiddenDirective is what guard panics with.
type forbiddenDirective struct{ line string }

func (f *forbiddenDirective) Error() string {
	name, _, _ := strings.Cut(f.line, " ")
	why := forbiddenDirectives[strings.ToLower(name)]
	return fmt.Sprintf("%s is %sit %s", name, refusal, why)
}

var (
	nop      = debuglog.Noop()
	nopDebug = nop.Debug()
)

// engineForbidden reports a directive the guard stops: every directive the
// pre-check forbids, except SecDataDir, which Coraza v3.8.1 stores and never
// reads, and which the embedded coraza.conf-recommended sets.
func engineForbidden(name string) bool {
	_, bad := forbiddenDirectives[name]
	return bad && name != "secdatadir"
}

func (g *guard) WithOutput(io.Writer) debuglog.Logger     { return g }
func (g *guard) WithLevel(debuglog.Level) debuglog.Logger { return g }
func (g *guard) With(...debuglog.ContextField) debuglog.Logger {
	return g
}
func (g *guard) Trace() debuglog.Event { return nop.Trace() }
func (g *guard) Info() debuglog.Event  { return nop.Info() }
func (g *guard) Warn() debuglog.Event  { return nop.Warn() }
func (g *guard) Error() debuglog.Event { return nop.Error() }

// Debug is called several times for every rule a request runs through, so
// outside a compile it returns the no-op event without a further call.
func (g *guard) Debug() debuglog.Event {
	if !g.compiling.Load() {
		return nopDebug
	}
	return &guardEvent{g: g}
}

// guardEvent collects the "line" field of one debug event.
type guardEvent struct {
	g    *guard
	line string
	has  bool
}

func (e *guardEvent) Msg(msg string) {
	if msg != "Parsing directive" || !e.has {
		return
	}
	e.g.parsed += int64(len(e.line))
	if e.g.record != nil {
		e.g.record(e.line)
	}
	name, _, _ := strings.Cut(e.line, " ")
	if engineForbidden(strings.ToLower(name)) {
		panic(&forbiddenDirective{line: e.line})
	}
}

func (e *guardEvent) Str(key, val string) debuglog.Event {
	if key == "line" {
		e.line, e.has = val, true
	}
	return e
}
func (e *guardEvent) Err(error) debuglog.Event                     { return e }
func (e *guardEvent) Bool(string, bool) debuglog.Event             { return e }
func (e *guardEvent) Int(string, int) debuglog.Event               { return e }
func (e *guardEvent) Uint(string, uint) debuglog.Event             { return e }
func (e *guardEvent) Stringer(string, fmt.Stringer) debuglog.Event { return e }
func (e *guardEvent) IsEnabled() bool                              { return true }
