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
