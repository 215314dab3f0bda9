package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/reuse"
)

// Evaluator runs the loaded rules on one object; *engine.Engine is one.
type Evaluator interface {
	Evaluate(ctx context.Context, obj *unstructured.Unstructured, opts engine.Options) ([]core.Result, error)
}

// handler decides admission requests. It implements admission.Handler.
type handler struct {
	eval     Evaluator
	bypass   *bypass
	log      *slog.Logger
	metrics  *Metrics
	health   *health
	failOpen bool
	verdicts core.VerdictSink
	slots    *slots
	// envMaps holds *reuse.Pool: a request's rule environment is built
	// from the maps of an earlier request's (engine.Options.Reuse), about
	// a sixth of what a request allocated. A Pool serves one request at a
	// time; the object's own maps are never in it.
	envMaps sync.Pool
}

var _ admission.Handler = (*handler)(nil)

// outcome is what Handle decided, for the metrics and readiness.
type outcome struct {
	decision string
	// failed marks a failure inside the handler (a recovered panic, an
	// internal error); denials are not failures.
	failed bool
	// malformed is the reason the request's content was refused without a
	// decision; such requests leave readiness and the decision counts alone.
	malformed string
}

// Handle implements admission.Handler. It never panics: a panic below it is
// recovered and answered like any internal error.
func (h *handler) Handle(ctx context.Context, req admission.Request) (resp admission.Response) {
	start := time.Now()
	out := outcome{decision: DecisionError}
	defer func() {
		if r := recover(); r != nil {
			err := fmt.Errorf("panic: %v", r)
			h.log.Error("admission handler failed", append(requestAttrs(&req), "error", err, "stack", string(debug.Stack()))...)
			resp, out = h.internalError(&req, err), outcome{decision: DecisionError, failed: true}
		}
		if out.malformed != "" {
			// Not recorded for readiness at all: a flood of them must
			// neither fail it nor push Portal's own failures out of the
			// window.
			h.metrics.Malformed.WithLabelValues(out.malformed).Inc()
			return
		}
		h.metrics.Latency.Observe(time.Since(start).Seconds())
		h.metrics.Requests.WithLabelValues(out.decision).Inc()
		h.health.record(out.failed)
	}()
	resp, out = h.decide(ctx, &req)
	return resp
}

func (h *handler) decide(ctx context.Context, req *admission.Request) (admission.Response, outcome) {
	// Break-glass comes first: it must work even while rules load.
	if h.bypass.active(ctx, req) {
		msg := "portal: namespace " + req.Namespace + " is annotated " + BypassAnnotation + "=true: rules were not evaluated (break-glass, audited)"
		resp := admission.Allowed(msg)
		resp.Warnings = []string{msg}
		return resp, outcome{decision: DecisionBypassed}
	}
	if !h.health.rulesLoaded() {
		return h.unavailable(req), outcome{decision: DecisionError}
	}
	obj, err := subject(req)
	if err != nil {
		return h.malformed(req, MalformedObjectUndecoded, err)
	}
	if obj == nil {
		return admission.Allowed(""), outcome{decision: DecisionAllowed}
	}
	creq, err := coreRequest(req)
	if err != nil {
		return h.malformed(req, MalformedObjectUndecoded, err)
	}
	// A cluster-scoped object's request has no namespace: such requests
	// share the fairness key "".
	release, err := h.slots.acquire(ctx, req.Namespace)
	if err != nil {
		return h.throttled(req, err)
	}
	// Held through the verdict too, so a panic below gives it back.
	defer release()
	// ctx carries the webhook's deadline: no evaluation outlives the
	// request.
	maps, _ := h.envMaps.Get().(*reuse.Pool)
	if maps == nil {
		maps = new(reuse.Pool)
	}
	results, err := h.eval.Evaluate(ctx, obj, engine.Options{Mode: core.ModeAdmission, Request: creq, Reuse: maps})
	h.envMaps.Put(maps)
	if errors.Is(err, engine.ErrInvalidObject) {
		return h.malformed(req, MalformedObjectShape, err)
	}
	if err != nil {
		return h.failure(req, err)
	}
	return h.verdict(req, results, reviewedUID(obj, creq))
}

// verdict aggregates the rules' results: any denying result rejects, with
// every denying result in the message; warn rules (and errors of rules with
// onError allow) add warnings; dryrun rules are only counted. uid is the
// reviewed object's, for the response actions.
func (h *handler) verdict(req *admission.Request, results []core.Result, uid string) (admission.Response, outcome) {
	var denials, warnings, exempted []string
	for i := range results {
		r := &results[i]
		if r.Outcome == core.OutcomePass {
			continue
		}
		if r.Outcome == core.OutcomeSkip {
			warnings = append(warnings, warning(describe(r)))
			exempted = append(exempted, exemption(r))
			continue
		}
		if r.Outcome == core.OutcomeError {
			h.metrics.RuleErrors.WithLabelValues(r.Rule.MetricLabel(), string(r.Rule.OnError)).Inc()
			h.log.Error("admission rule evaluation failed", append(requestAttrs(req),
				"rule", r.Rule.Name, "onError", string(r.Rule.OnError), "error", r.Message)...)
		}
		switch {
		case r.Denies():
			denials = append(denials, describe(r))
		case r.Outcome == core.OutcomeError, r.Rule.EnforcementAction == core.ActionWarn:
			warnings = append(warnings, warning(describe(r)))
		case r.Rule.EnforcementAction == core.ActionDryRun:
			h.metrics.DryRunViolations.WithLabelValues(r.Rule.MetricLabel()).Inc()
			if h.log.Enabled(context.Background(), slog.LevelDebug) {
				h.log.Debug("admission dryrun violation", append(requestAttrs(req), "rule", r.Rule.Name, "message", r.Message)...)
			}
		}
	}
	h.handOver(req, results, uid, len(denials) > 0)
	warnings = boundedList(warnings, MaxWarningBytes, "warnings")
	annotations := h.exempted(req, exempted)
	if len(denials) > 0 {
		msg := strings.Join(boundedList(denials, MaxDenialBytes, "denials"), "; ")
		h.log.Info("admission denied", append(requestAttrs(req), "reason", msg)...)
		resp := admission.Denied(msg)
		resp.Warnings, resp.AuditAnnotations = warnings, annotations
		return resp, outcome{decision: DecisionDenied}
	}
	resp := admission.Allowed("")
	resp.AuditAnnotations = annotations
	if len(warnings) > 0 {
		resp.Warnings = warnings
		return resp, outcome{decision: DecisionWarned}
	}
	return resp, outcome{decision: DecisionAllowed}
}

// Bounds of a response, whatever the number of rules and containers: the
// API server keeps at most 4,096 characters of warnings itself.
const (
	MaxDenialBytes  = 16 << 10
	MaxWarningBytes = 4 << 10
)

// boundedList keeps the first items of list that fit in max bytes together
// and says how many it left out.
func boundedList(list []string, max int, what string) []string {
	n := 0
	for i, s := range list {
		if n += len(s) + 2; n > max && i > 0 {
			return append(slices.Clip(list[:i]), fmt.Sprintf("... %d more %s (at most %d bytes; Portal's logs have each)", len(list)-i, what, max))
		}
	}
	return list
}

// handOver offers the failing results of rules with actions to the
// response actions, one verdict per rule: a rule's actions act on the
// object, whatever number of its containers failed. Offer never blocks; the
// sink counts what it drops.
//
// A dry-run request changes nothing, and the webhook declares sideEffects
// None: its verdicts go nowhere, or `--dry-run=server` would let anyone who
// may create a pod have Portal evict a live pod of the same name. Each
// verdict carries the reviewed object's UID, so the actions touch only the
// live object with exactly that UID, never one that merely shares its name
// (a refused CREATE, a forged review).
func (h *handler) handOver(req *admission.Request, results []core.Result, uid string, denied bool) {
	if h.verdicts == nil || (req.DryRun != nil && *req.DryRun) {
		return
	}
	var (
		now     time.Time
		offered []*core.Rule
	)
	for i := range results {
		if !results[i].WantsVerdict() || slices.Contains(offered, results[i].Rule) {
			continue
		}
		offered = append(offered, results[i].Rule)
		if now.IsZero() {
			now = time.Now()
		}
		v := core.Verdict{Result: results[i], Operation: string(req.Operation), Denied: denied, Observed: now}
		v.Resource.UID = uid
		h.verdicts.Offer(v)
	}
}

// describe renders one result as `[rule] message (container: name)`.
func describe(r *core.Result) string {
	var b strings.Builder
	b.WriteString("[")
	b.WriteString(r.Rule.Name)
	b.WriteString("] ")
	msg := r.Message
	if r.Outcome == core.OutcomeError {
		// expr-lang errors carry the expression and a caret on further
		// lines; the first line says what failed, the log has the rest.
		b.WriteString("evaluation error: ")
		msg, _, _ = strings.Cut(msg, "\n")
	}
	if r.Outcome == core.OutcomeSkip {
		b.WriteString("skipped: ")
	}
	b.WriteString(msg)
	if r.Container != "" {
		b.WriteString(" (container: ")
		b.WriteString(r.Container)
		b.WriteString(")")
	}
	return b.String()
}

// warning makes s acceptable as an HTTP Warning header: the API server drops
// warnings holding control characters, so they become spaces.
func warning(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// failure answers an internal error and marks it for readiness.
func (h *handler) failure(req *admission.Request, err error) (admission.Response, outcome) {
	h.log.Error("admission handler failed", append(requestAttrs(req), "error", err)...)
	return h.internalError(req, err), outcome{decision: DecisionError, failed: true}
}

// malformed refuses a request whose content Portal cannot evaluate: an
// object the API server would never send. It is rejected whatever the
// failure policy (Portal did not fail; the request is wrong), counted, and
// not a handler failure, so requests from anything but the API server cannot
// take a replica out of readiness.
func (h *handler) malformed(req *admission.Request, reason string, err error) (admission.Response, outcome) {
	h.log.Debug("malformed admission request", append(requestAttrs(req), "reason", reason, "error", err)...)
	resp := admission.Errored(http.StatusBadRequest, fmt.Errorf("malformed AdmissionReview: %w", err))
	resp.Result.Reason = metav1.StatusReasonBadRequest
	return resp, outcome{decision: DecisionError, malformed: reason}
}

// internalError rejects the request (fail closed) or, with FailOpen, admits
// it with a warning, matching the webhook's failurePolicy.
func (h *handler) internalError(req *admission.Request, err error) admission.Response {
	msg := fmt.Sprintf("portal: internal error evaluating %s %s: %v", req.Kind.Kind, objectName(req), err)
	if h.failOpen {
		resp := admission.Allowed("")
		resp.Warnings = []string{warning(msg + " (admitted: Portal runs fail-open)")}
		return resp
	}
	return admission.Errored(http.StatusInternalServerError, fmt.Errorf("%s", msg))
}

// throttled answers a request that got no evaluation slot. It is not a
// failure for readiness: marking replicas unready under a flood would move
// the flood to the others and end with no webhook endpoint at all. The
// answer is 429 with Retry-After, which the API server passes on to its
// client, so client-go clients (controllers, kubectl) retry by themselves.
func (h *handler) throttled(req *admission.Request, err error) (admission.Response, outcome) {
	ns := req.Namespace
	if ns == clusterScoped {
		ns = "(cluster-scoped)"
	}
	msg := fmt.Sprintf("portal: %s %s was not evaluated: %v (namespace %s; Portal evaluates at most %d requests at once, "+
		"shared round-robin across namespaces: --webhook-max-concurrent-evaluations, portal_admission_throttled_total)",
		req.Kind.Kind, objectName(req), err, ns, h.slots.capacity)
	h.log.Debug("admission request throttled", append(requestAttrs(req), "error", err)...)
	out := outcome{decision: DecisionThrottled}
	if h.failOpen {
		resp := admission.Allowed("")
		resp.Warnings = []string{warning(msg + " (admitted: Portal runs fail-open)")}
		return resp, out
	}
	resp := admission.Errored(http.StatusTooManyRequests, errors.New(msg))
	resp.Result.Reason = metav1.StatusReasonTooManyRequests
	resp.Result.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	return resp, out
}

// unavailable answers while the initial rule load is incomplete, so a
// restarting Portal never admits with a partial rule set.
func (h *handler) unavailable(req *admission.Request) admission.Response {
	const msg = "portal: rules are still loading"
	if h.failOpen {
		resp := admission.Allowed("")
		resp.Warnings = []string{msg + " (admitted: Portal runs fail-open)"}
		return resp
	}
	return admission.Errored(http.StatusServiceUnavailable, fmt.Errorf("%s; retry shortly", msg))
}

func objectName(req *admission.Request) string {
	if req.Namespace == "" {
		return req.Name
	}
	return req.Namespace + "/" + req.Name
}

// requestAttrs are the log attributes that identify a request.
func requestAttrs(req *admission.Request) []any {
	return []any{
		"uid", string(req.UID),
		"operation", string(req.Operation),
		"kind", req.Kind.Kind,
		"namespace", req.Namespace,
		"name", req.Name,
		"user", req.UserInfo.Username,
	}
}
