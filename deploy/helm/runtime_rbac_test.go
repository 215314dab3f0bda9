package helm_test

import (
	"strings"
	"testing"
)

// In split mode the runtime Deployment reads pods (the cluster cache the
// targets of runtime events come from), writes reports and runs the
// enabled actions, and nothing else: it never reads Secrets, though
// secret-read rules are about them, nor writes webhook configurations.
func TestSplitModeRuntimeRBAC(t *testing.T) {
	manifest, err := render(t, "", "global.mode=split", "fullnameOverride=rt", "admission.enabled=false", "runtime.enabled=true",
		"runtime.certSecret=rt-tls", "runtime.auditTokenSecret=rt-token", "actions.label.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	sas := applyRBAC(t, manifest)
	if sas["runtime"] == "" {
		t.Fatalf("no runtime Deployment: %v", sas)
	}
	const team = "team-rt"
	checkAccess(t, sas, []access{
		{"runtime", "list", "", "pods", "", "", "", true},
		{"runtime", "watch", "", "pods", "", "", "", true},
		// The leader label on its own pod (--leader-pod).
		{"runtime", "patch", "", "pods", "", releaseNS, "", true},
		{"runtime", "patch", "", "pods", "", team, "", true},
		{"runtime", "create", "wgpolicyk8s.io", "policyreports", "", team, "", true},
		{"runtime", "watch", "portal.io", "portalclusterrules", "", "", "", true},
		{"runtime", "get", "", "secrets", "", team, "", false},
		{"runtime", "list", "", "secrets", "", "", "", false},
		{"runtime", "create", "", "serviceaccounts", "token", team, "", false},
		{"runtime", "list", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", "", false},
		// Nodes are the audit log DaemonSet's, which is off.
		{"runtime", "get", "", "nodes", "", "", "", false},
	})
}

// The audit log DaemonSet's pods may read their Node, which they name with
// --report-owner-node so the API server deletes their reports with it; and
// only read one: they list and write no Nodes, and the other layers' pods
// may not read Nodes at all.
func TestAuditLogReaderMayGetItsNode(t *testing.T) {
	manifest, err := render(t, "", "global.mode=split", "fullnameOverride=rtlog", "admission.enabled=false", "audit.enabled=true", "runtime.enabled=true",
		"runtime.certSecret=rt-tls", "runtime.auditTokenSecret=rt-token", "runtime.auditLog.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(manifest), "--report-owner-node=$(NODE_NAME)") {
		t.Error("the audit log DaemonSet does not name its Node with --report-owner-node")
	}
	sas := applyRBAC(t, manifest)
	checkAccess(t, sas, []access{
		{"runtime-audit-log", "get", "", "nodes", "", "", "cp-1", true},
		{"runtime-audit-log", "list", "", "nodes", "", "", "", false},
		{"runtime-audit-log", "update", "", "nodes", "", "", "cp-1", false},
		{"runtime-audit-log", "update", "", "nodes", "finalizers", "", "cp-1", false},
		{"audit", "get", "", "nodes", "", "", "cp-1", false},
	})
}
