package main

import (
	"strings"
	"testing"
)

// TestRunWebhookClientNamesNeedCA: allowed names without the CA that signs
// the certificates they are checked on is a usage error that says so,
// before Portal touches a cluster.
func TestRunWebhookClientNamesNeedCA(t *testing.T) {
	_, err := runCLI(t, "", "run", "--admission", "--webhook-client-allowed-names=kube-apiserver", "--kubeconfig=/nonexistent")
	if code := exitCodeOf(err); code != exitUsage || err == nil || !strings.Contains(err.Error(), "--webhook-client-allowed-names needs --webhook-client-ca-file") {
		t.Fatalf("exit %d: %v", code, err)
	}
}

// TestRunAllowTenantKindsChecked: --allow-tenant-kinds takes only the kinds
// PortalRules are refused, so a typo (or Secret, never allowed) is a usage
// error instead of a flag that silently allows nothing.
func TestRunAllowTenantKindsChecked(t *testing.T) {
	for _, v := range []string{"Lease", "Secret", "Lease.coordination.k8s.io,ConfigMap"} {
		_, err := runCLI(t, "", "run", "--allow-tenant-kinds="+v, "--kubeconfig=/nonexistent")
		if code := exitCodeOf(err); code != exitUsage || err == nil || !strings.Contains(err.Error(), "--allow-tenant-kinds") {
			t.Errorf("%s: exit %d: %v", v, code, err)
		}
	}
}

// TestRunExceptionNamespacesChecked: a malformed glob in
// --exception-namespaces is a usage error, not a list that silently honours
// no PortalException.
func TestRunExceptionNamespacesChecked(t *testing.T) {
	_, err := runCLI(t, "", "run", "--exception-namespaces=team-*,[a-", "--kubeconfig=/nonexistent")
	if code := exitCodeOf(err); code != exitUsage || err == nil || !strings.Contains(err.Error(), "--exception-namespaces") {
		t.Errorf("exit %d: %v", code, err)
	}
}

// TestRunExceptionMaxDurationChecked: a negative bound is a usage error.
func TestRunExceptionMaxDurationChecked(t *testing.T) {
	_, err := runCLI(t, "", "run", "--exception-max-duration=-1h", "--kubeconfig=/nonexistent")
	if code := exitCodeOf(err); code != exitUsage || err == nil || !strings.Contains(err.Error(), "--exception-max-duration") {
		t.Errorf("exit %d: %v", code, err)
	}
}
