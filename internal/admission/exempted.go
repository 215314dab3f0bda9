package admission

import (
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/vilaca/portal/internal/core"
)

// AuditAnnotationExceptions is the key of the audit annotation that lists
// the exceptions a request was admitted under; the API server prefixes it
// with the webhook's name. Its value is bounded by MaxWarningBytes.
const AuditAnnotationExceptions = "exceptions"

// exemption names the rule an exception exempted the request from, and the
// exception: "no-privileged=PortalException billing/legacy".
func exemption(r *core.Result) string {
	return r.Rule.MetricLabel() + "=" + r.Exception.String()
}

// exempted logs the exceptions a request was admitted under, and returns
// the audit annotations that record them in the API server's audit log: an
// exception is a decision to let something through, and whoever reviews
// the audit log must see it next to the request.
func (h *handler) exempted(req *admission.Request, exempted []string) map[string]string {
	if len(exempted) == 0 {
		return nil
	}
	h.log.Info("admission exception applied", append(requestAttrs(req), "exceptions", exempted)...)
	return map[string]string{
		AuditAnnotationExceptions: strings.Join(boundedList(exempted, MaxWarningBytes, "exceptions"), ", "),
	}
}
