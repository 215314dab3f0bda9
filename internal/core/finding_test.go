package core_test

import (
	"testing"
	"time"

	"github.com/vilaca/portal/internal/core"
)

func finding(producer, ruleKind, ruleNS, rule, apiVersion, ns, name, container string) core.Finding {
	r := &core.Rule{Name: rule, Namespace: ruleNS, Source: core.Source{Kind: ruleKind, Name: rule}}
	return core.Finding{
		Producer: producer,
		Result: core.Result{Rule: r, Outcome: core.OutcomeFail, Container: container, Message: "m",
			Resource: core.ResourceRef{APIVersion: apiVersion, Kind: "Deployment", Namespace: ns, Name: name, UID: "u1"}},
		FirstSeen: time.Unix(1, 0),
	}
}

// The result ID is the same for the same finding however it was produced,
// and differs when the producer, the rule, the object or the container
// differs.
func TestResultID(t *testing.T) {
	base := finding("audit", "PortalClusterRule", "", "r", "apps/v1", "shop", "web", "c")
	same := base
	same.Message, same.FirstSeen, same.Outcome = "other message", time.Now(), core.OutcomeError
	same.Resource.UID = "u2"
	same.Resource.APIVersion = "apps/v1beta2"
	same.Rule = &core.Rule{Name: "r", Source: core.Source{Kind: "PortalClusterRule", Name: "r"}, Severity: core.SeverityHigh}
	if base.ResultID() != same.ResultID() {
		t.Errorf("message, time, outcome, UID, version or severity changed the result ID")
	}
	if len(base.ResultID()) != 32 {
		t.Errorf("result ID %q is not 32 hex digits", base.ResultID())
	}
	// Pinned: a change of the hash would renotify every open result after an
	// upgrade.
	if got, want := base.ResultID(), "95d4cb78e94ac660b1eb72f9be0804c7"; got != want {
		t.Errorf("result ID = %s, want %s", got, want)
	}
	others := map[string]core.Finding{
		"producer":       finding("network", "PortalClusterRule", "", "r", "apps/v1", "shop", "web", "c"),
		"rule kind":      finding("audit", "PortalRule", "", "r", "apps/v1", "shop", "web", "c"),
		"rule namespace": finding("audit", "PortalClusterRule", "shop", "r", "apps/v1", "shop", "web", "c"),
		"rule":           finding("audit", "PortalClusterRule", "", "r2", "apps/v1", "shop", "web", "c"),
		"group":          finding("audit", "PortalClusterRule", "", "r", "v1", "shop", "web", "c"),
		"namespace":      finding("audit", "PortalClusterRule", "", "r", "apps/v1", "shop2", "web", "c"),
		"name":           finding("audit", "PortalClusterRule", "", "r", "apps/v1", "shop", "web2", "c"),
		"container":      finding("audit", "PortalClusterRule", "", "r", "apps/v1", "shop", "web", ""),
		// Fields run into each other without the length prefix.
		"boundary": finding("audit", "PortalClusterRule", "", "r", "apps/v1", "sho", "pweb", "c"),
	}
	seen := map[string]string{base.ResultID(): "base"}
	for what, f := range others {
		id := f.ResultID()
		if prev, dup := seen[id]; dup {
			t.Errorf("a different %s gives the result ID of %s", what, prev)
		}
		seen[id] = what
	}
}
