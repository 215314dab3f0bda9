//go:build kyverno

package eval_test

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/pod-security-admission/policy"
)

// psaVerdicts decides each generated Pod with k8s.io/pod-security-admission,
// the newest version of each check, under the name of the library rule that
// implements that check (pss-<level>-<check id in kebab case>). Where a
// pair differs, docs/library.md says Portal follows the standard; this is
// what backs that.
func psaVerdicts(b *testing.B, cases []parityCase) verdicts {
	v := verdicts{}
	for _, obj := range parityObjects(cases) {
		if obj["kind"] != "Pod" {
			continue
		}
		var pod corev1.Pod
		if err := json.Unmarshal(must(json.Marshal(obj)), &pod); err != nil {
			b.Fatalf("generated pod: %v", err)
		}
		key := objectKey{"Pod", pod.Name}
		for _, c := range policy.DefaultChecks() {
			id := strings.TrimSuffix(strings.TrimSuffix(string(c.ID), "_baseline"), "_restricted")
			rule := "pss-" + string(c.Level) + "-" + kebabCase(id)
			result := "pass"
			if !c.Versions[len(c.Versions)-1].CheckPod(&pod.ObjectMeta, &pod.Spec).Allowed {
				result = "fail"
			}
			v.add(rule, key, result)
		}
	}
	return v
}

// checkPSA fails where Portal's Pod Security Standards rule and the
// reference decide a generated Pod differently, and returns how many Pod
// verdicts it compared.
func checkPSA(b *testing.B, cases []parityCase, portal verdicts) int {
	psa := psaVerdicts(b, cases)
	compared := 0
	for _, p := range kyvernoPairs {
		if !strings.HasPrefix(p.rule, "pss-") {
			continue
		}
		if psa[p.rule] == nil {
			b.Fatalf("no pod-security-admission check for %s", p.rule)
		}
		for _, c := range cases {
			key := objectKey{"Pod", c.name}
			compared++
			if got, want := portal.of(p.rule, key), psa.of(p.rule, key); got != want {
				b.Errorf("Pod %s: Portal's %s says %s, pod-security-admission says %s", c.name, p.rule, got, want)
			}
		}
	}
	return compared
}

// kebabCase turns a check id into a rule name's last part: appArmorProfile
// -> app-armor-profile.
func kebabCase(id string) string {
	var sb strings.Builder
	for i, r := range id {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				sb.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		sb.WriteRune(r)
	}
	return sb.String()
}
