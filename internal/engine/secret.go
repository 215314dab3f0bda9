package engine

import (
	"errors"
	"fmt"
	"maps"

	"github.com/vilaca/portal/internal/core"
)

// A Secret's values must never leave an evaluation through its message or
// its error: both go to the API client (denials, warnings), the log, the
// findings, Alertmanager and PolicyReports, which people who may not read the
// Secret can read. The rule itself still sees the values (a rule may check a
// Secret's content); only what is printed about it is redacted.

// Redacted replaces each value of a Secret's data and stringData, and of the
// annotations that copy them, in what messages see.
const Redacted = "<redacted>"

// lastApplied is kubectl's annotation holding the whole object as applied,
// data included.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// isSecret reports whether obj, an object as rules see it, is a core/v1
// Secret.
func isSecret(obj any) bool {
	m, ok := obj.(map[string]any)
	return ok && m["apiVersion"] == "v1" && m["kind"] == "Secret"
}

// forPrinting returns what verdict prints from once the rule's expression has
// run: the environment of the message holes, the value and the error. For a
// Secret they hide its values; for anything else they are returned as is.
func forPrinting(env core.Env, v any, err error) (core.Env, any, error) {
	if !isSecret(env["object"]) {
		return env, v, err
	}
	if _, isBool := v.(bool); v != nil && !isBool {
		// A rule that evaluates to a value instead of a boolean has that
		// value printed in its error; on a Secret it may be one of the
		// Secret's values, or derived from one.
		v = Redacted
	}
	return messageEnv(env), v, secretSafeError(env, err)
}

// messageEnv is the environment a rule's message sees: env itself, except for
// a Secret, whose object, old object and metadata sugar are copies with their
// values redacted (keys kept, so a message can still name them). env is not
// modified: the rule's own evaluation, and the next rule's, see the values.
func messageEnv(env core.Env) core.Env {
	if !isSecret(env["object"]) {
		return env
	}
	out := maps.Clone(env)
	out["object"] = redactSecret(env["object"])
	if req, ok := env["request"].(map[string]any); ok {
		req = maps.Clone(req)
		req["oldObject"] = redactSecret(req["oldObject"])
		out["request"] = req
	}
	if md, ok := env["metadata"].(map[string]any); ok {
		md = maps.Clone(md)
		md["annotations"] = redactAnnotations(md["annotations"])
		out["metadata"] = md
	}
	return out
}

// redactSecret returns a copy of a Secret with its values redacted; anything
// else (nil, an oldObject that is not a Secret) is returned as is.
func redactSecret(obj any) any {
	m, ok := obj.(map[string]any)
	if !ok || !isSecret(m) {
		return obj
	}
	m = maps.Clone(m)
	for _, field := range []string{"data", "stringData"} {
		if v, ok := m[field]; ok {
			m[field] = redactValues(v)
		}
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		md = maps.Clone(md)
		if a, ok := md["annotations"]; ok {
			md["annotations"] = redactAnnotations(a)
		}
		m["metadata"] = md
	}
	return m
}

// redactValues keeps the keys of a data map and replaces every value; a
// value of any other shape (the API server never sends one) is replaced
// whole.
func redactValues(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return Redacted
	}
	out := make(map[string]any, len(m))
	for k := range m {
		out[k] = Redacted
	}
	return out
}

func redactAnnotations(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	if _, found := m[lastApplied]; !found {
		return v
	}
	m = maps.Clone(m)
	m[lastApplied] = Redacted
	return m
}

// errWithheld stands for an evaluation error on a Secret, whose text may
// quote one of its values (a value that does not parse as a number, say).
var errWithheld = errors.New("the error text is withheld on Secrets, as it may quote their data (portal eval on a copy without real values shows it)")

// secretSafeError returns err when its text cannot quote the object's
// values: a budget error (whose reason the rule's status reports), or any
// error on an object that is not a Secret. Otherwise it returns an error that
// says only that evaluating failed.
func secretSafeError(env core.Env, err error) error {
	if err == nil || !isSecret(env["object"]) {
		return err
	}
	if be, ok := errors.AsType[*core.BudgetError](err); ok {
		// The kind and limit say why; what it wraps (a pattern the rule
		// built from the Secret's data) may quote a value.
		if be.Err != nil && be.Kind != core.BudgetDeadline {
			return &core.BudgetError{Kind: be.Kind, Limit: be.Limit, Err: errWithheld}
		}
		return be
	}
	return fmt.Errorf("evaluating the rule failed: %w", errWithheld)
}
