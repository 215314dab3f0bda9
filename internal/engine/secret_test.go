package engine_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

// The values of the Secret below, as stored (data is base64) and decoded.
const (
	secretValue   = "aHVudGVyMg==" // hunter2
	secretDecoded = "hunter2"
	stringValue   = "s3cr3t-string-data"
)

func secret() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "db", "namespace": "t", "annotations": map[string]any{
			"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"password":"` + secretValue + `"}}`,
		}},
		"data":       map[string]any{"password": secretValue},
		"stringData": map[string]any{"token": stringValue},
	}}
}

// evaluateSecret evaluates one rule on secret() and returns its result.
func evaluateSecret(t *testing.T, expr, msg string) core.Result {
	t.Helper()
	e := engine.New(exprlang.New())
	r := newRule("s", expr)
	r.Match.GVKs = []core.GVK{{Version: "v1", Kind: "Secret"}}
	r.Message = msg
	c, err := e.Compile(r)
	if err != nil {
		t.Fatal(err)
	}
	e.SetRules([]*engine.Rule{c})
	obj := secret()
	req := &core.Request{Operation: "UPDATE", OldObject: secret().Object}
	res, err := e.Evaluate(context.Background(), obj, engine.Options{Mode: core.ModeAdmission, Request: req})
	if err != nil || len(res) != 1 {
		t.Fatalf("evaluate: %v %v", res, err)
	}
	if v, _, _ := unstructured.NestedString(obj.Object, "data", "password"); v != secretValue {
		t.Fatalf("the evaluated object was modified: data.password %q", v)
	}
	return res[0]
}

func mustNotLeak(t *testing.T, what, s string) {
	t.Helper()
	for _, v := range []string{secretValue, secretDecoded, stringValue} {
		if strings.Contains(s, v) {
			t.Errorf("%s prints the Secret's value %q: %s", what, v, s)
		}
	}
}

// TestSecretValuesNeverReachMessages: the rule sees a Secret's values, its
// message sees them redacted with their keys kept, and neither its error nor
// a non-boolean result prints them.
func TestSecretValuesNeverReachMessages(t *testing.T) {
	// The rule reads the real value: it fails because the password is

	res := evaluateSecret(t, `object.data.password == "aHVudGVyMg=="`,
		`{{ object.data }} {{ object.stringData }} {{ request.oldObject.data }} {{ metadata.annotations }} {{ object.metadata.annotations }}`)
	if res.Outcome != core.OutcomeFail {
		t.Fatalf("outcome %s (%s), want fail: the rule must see the real value", res.Outcome, res.Message)
	}
	mustNotLeak(t, "the message", res.Message)
	for _, want := range []string{"password", "token", engine.Redacted} {
		if !strings.Contains(res.Message, want) {
			t.Errorf("message %q lacks %q: keys stay, values are redacted", res.Message, want)
		}
	}

	for name, expr := range map[string]string{
		"an error quoting the value":               `int(object.data.password) > 0`,
		"an error quoting the value of stringData": `int(object.stringData.token) > 0`,
		"a non-boolean result":                     `object.data.password`,
	} {
		res := evaluateSecret(t, expr, "unused")
		if res.Outcome != core.OutcomeError {
			t.Fatalf("%s: outcome %s, want error", name, res.Outcome)
		}
		mustNotLeak(t, name+": the message", res.Message)
		if res.Err != nil {
			mustNotLeak(t, name+": the error", res.Err.Error())
		}
		t.Logf("%s: %s", name, res.Message)
	}
}

// TestSecretBudgetErrorsStay: a budget error cannot quote a value, and the
// rule's status reports which budget ran out, so it is kept on Secrets.
func TestSecretBudgetErrorsStay(t *testing.T) {
	res := evaluateSecret(t, `count(1..100000000, # > 0) > 0`, "")
	if res.Outcome != core.OutcomeError || !strings.Contains(res.Message, core.ErrBudgetExceeded.Error()) {
		t.Fatalf("got %s %q, want a budget error", res.Outcome, res.Message)
	}
}

// TestSecretPatternErrorsWithheld: a budget error may wrap what a rule built
// from the Secret (a pattern of its value that does not compile): its kind
// stays, its text does not.
func TestSecretPatternErrorsWithheld(t *testing.T) {
	res := evaluateSecret(t, `"x" matches ("*" + object.stringData.token)`, "")
	if res.Outcome != core.OutcomeError || !strings.Contains(res.Message, "a pattern the rule built is too large") {
		t.Fatalf("got %s %q, want the pattern budget error", res.Outcome, res.Message)
	}
	mustNotLeak(t, "the pattern error", res.Message)
}

// TestMessagesOfOtherKindsUnchanged: only Secrets are redacted.
func TestMessagesOfOtherKindsUnchanged(t *testing.T) {
	cm := configMap(4)
	res := evaluateMessage(t, exprlang.DefaultLimits(), "true", "{{ object.data.k }}", cm)
	if res.Message != "xxxx" {
		t.Fatalf("message %q, want the ConfigMap's value", res.Message)
	}
}
