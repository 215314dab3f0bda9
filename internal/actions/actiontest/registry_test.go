// Package actiontest_test registers a response action from outside
// internal/actions and shows what registering it is enough for, and which
// drift checks then name the declarations still to write, as
// docs/contributing/adding-an-action.md says.
package actiontest_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/manager"
	"github.com/vilaca/portal/internal/rule"
)

// testAction is the test-only action: this file's init and type are all
// it takes.
const testAction = "test-ring-bell"

func init() { actions.Register(testAction, func(actions.Env) actions.Action { return bell{} }) }

type bell struct{}

func (bell) Apply(context.Context, *actions.Request) (actions.Outcome, error) {
	return actions.Outcome{Result: actions.ResultSuccess, Detail: "rang"}, nil
}

func (bell) Permissions() []authorizationv1.ResourceAttributes {
	return []authorizationv1.ResourceAttributes{{Verb: "create", Resource: "events", Group: "events.k8s.io"}}
}

// TestRegisteredActionNeedsNoOtherCode: the registration alone puts the
// action in the registry, in --actions-enabled's help and validation, and
// its permissions where ActionsReady and the chart's RBAC test read them.
func TestRegisteredActionNeedsNoOtherCode(t *testing.T) {
	if !slices.Contains(actions.Types(), testAction) {
		t.Fatalf("actions.Types() = %v, want %s in it", actions.Types(), testAction)
	}
	perms, ok := actions.Permissions(testAction)
	if !ok || len(perms) != 1 || perms[0].Resource != "events" {
		t.Errorf("actions.Permissions(%s) = %v, %v; want the action's own", testAction, perms, ok)
	}
	cfg := manager.Defaults()
	fs := pflag.NewFlagSet("portal", pflag.ContinueOnError)
	for _, l := range manager.Layers() {
		l.AddFlags(fs, &cfg)
	}
	f := fs.Lookup("actions-enabled")
	if f == nil || !strings.Contains(f.Usage, testAction) {
		t.Fatalf("--actions-enabled's help does not name %s: %+v", testAction, f)
	}
	if err := fs.Parse([]string{"--actions", "--actions-enabled", testAction}); err != nil {
		t.Fatal(err)
	}
	for _, l := range manager.Layers() {
		if err := l.CheckFlags(&cfg); err != nil {
			t.Errorf("--actions-enabled %s refused: %v", testAction, err)
		}
	}
}

// TestRegisteredActionAppearsInDriftChecks: the declarations a new action
// still needs outside its file (the CRD enum, the rule loader's list) are
// named by the drift checks, each saying what to edit.
func TestRegisteredActionAppearsInDriftChecks(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/crds/portal.io_portalrules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	enum, err := actions.CRDEnum(raw)
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]string{
		"CRD enum":    actions.EnumDrift(enum),
		"rule loader": actions.LoaderDrift(rule.ActionTypes()),
	} {
		if len(got) != 1 || !strings.Contains(got[0], `"`+testAction+`"`) || !strings.Contains(got[0], "edit") && !strings.Contains(got[0], "change") {
			t.Errorf("%s drift = %q; want exactly the test action named, with what to edit", name, got)
		}
	}
}
