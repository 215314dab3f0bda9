package admission_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
)

// TestExceptionAdmitsWithWarningAndAuditAnnotation: a privileged pod an
// exception covers is admitted, with a warning naming the exception and its
// reason and the audit annotation that records it in the API server's audit
// log; the same pod in a namespace the exception does not cover is denied
// and carries no annotation.
func TestExceptionAdmitsWithWarningAndAuditAnnotation(t *testing.T) {
	eng := engine.New(exprlang.New())
	r, err := eng.Compile(&core.Rule{Name: "no-privileged", Enabled: true, Modes: []core.Mode{core.ModeAdmission},
		EnforcementAction: core.ActionDeny, OnError: core.OnErrorDeny,
		Match: core.Match{GVKs: []core.GVK{{Kind: "Pod"}}}, Expression: "container.securityContext.privileged == true", Message: "privileged"})
	if err != nil {
		t.Fatal(err)
	}
	eng.SetRules([]*engine.Rule{r})
	x, err := eng.CompileException(&core.Exception{Kind: "PortalException", Namespace: "default", Name: "legacy",
		Rules: []string{"no-privileged"}, Match: core.ExceptionMatch{GVKs: []core.GVK{{Kind: "Pod"}}}, Reason: "vendor image"})
	if err != nil {
		t.Fatal(err)
	}
	eng.SetExceptions([]*engine.Exception{x})
	logs := &syncWriter{}
	wh, err := admission.New(admission.Options{
		Evaluator: eng, Registerer: prometheus.NewRegistry(), Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		Namespaces: fake.NewClientBuilder().WithObjects(
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
		).Build(),
	})
	if err != nil {
		t.Fatal(err)
	}

	resp := post(t, wh, review("u1", "CREATE", "default", true))
	if !resp.Allowed {
		t.Fatalf("exempted pod denied: %+v", resp.Result)
	}
	if len(resp.Warnings) != 1 || resp.Warnings[0] != "[no-privileged] skipped: exempted by PortalException default/legacy: vendor image" {
		t.Errorf("warnings %q", resp.Warnings)
	}
	if got := resp.AuditAnnotations[admission.AuditAnnotationExceptions]; got != "no-privileged=PortalException default/legacy" {
		t.Errorf("audit annotation %q", got)
	}
	if len(logs.lines(`"msg":"admission exception applied"`, `"namespace":"default"`)) != 1 {
		t.Errorf("no log line for the exception:\n%s", logs)
	}

	resp = post(t, wh, review("u2", "CREATE", "shop", true))
	if resp.Allowed || len(resp.AuditAnnotations) != 0 || strings.Contains(strings.Join(resp.Warnings, " "), "exempted") {
		t.Errorf("pod outside the exception's namespace: %+v", resp)
	}
}
