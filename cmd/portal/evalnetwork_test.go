package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/eval"
	"github.com/vilaca/portal/internal/network"
)

const networkFixture = "../../internal/network/testdata/cluster.yaml"

// portal eval --network reports what network.Analyse finds on the same
// manifests (which TestOfflineMatchesLive ties to the live analyser), needs
// no --rules, and exits 1 on a finding.
func TestEvalNetwork(t *testing.T) {
	out, err := runCLI(t, "", "eval", "--network", "--file", networkFixture, "-o", "json")
	if code := exitCodeOf(err); code != exitViolation {
		t.Fatalf("exit code %d, want %d: %v\n%s", code, exitViolation, err, out)
	}
	var report struct {
		Results []eval.Result `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("decode: %v\n%s", err, out)
	}
	var got []string
	for _, r := range report.Results {
		if r.EnforcementAction != eval.NetworkAction || r.Result != "fail" {
			t.Errorf("result %+v: want a failing %s result", r, eval.NetworkAction)
		}
		got = append(got, fmt.Sprintf("%s/%s/%s %s: %s", r.Resource.Kind, r.Resource.Namespace, r.Resource.Name, r.Rule, r.Message))
	}
	state, errs := eval.LoadClusterState([]string{networkFixture}, nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	found, err := network.Analyse(state, network.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, of := range found {
		for _, f := range of.Findings {
			want = append(want, fmt.Sprintf("%s/%s/%s %s: %s", of.Object.Kind, of.Object.Namespace, of.Object.Name, f.RuleName(), f.Message))
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("eval --network:\n  %s\nnetwork.Analyse:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	// A check switched off is not run; an unknown one is a usage error
	// naming the flag.
	out, err = runCLI(t, "", "eval", "--network", "--network-checks", network.CheckBroadCIDR, "--file", networkFixture)
	if exitCodeOf(err) != exitViolation || !strings.Contains(out, network.CheckBroadCIDR) || strings.Contains(out, network.CheckDefaultDenyMissing) {
		t.Errorf("--network-checks %s: exit %d, output:\n%s", network.CheckBroadCIDR, exitCodeOf(err), out)
	}
	_, err = runCLI(t, "", "eval", "--network", "--network-checks", "np.nope", "--file", networkFixture)
	if exitCodeOf(err) != exitUsage || !strings.Contains(err.Error(), "--network-checks") {
		t.Errorf("unknown check: exit %d, error %v; want a usage error naming --network-checks", exitCodeOf(err), err)
	}
}
