package admission

import (
	"context"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// BypassAnnotation on a namespace, set to "true", admits every request for
// objects in that namespace without evaluating rules. Setting it needs patch
// on namespaces, which is normally a privileged permission: by design.
const BypassAnnotation = "portal.io/bypass"

// bypass is the break-glass check. Every bypass is counted and written to the
// log as an audit line.
type bypass struct {
	namespaces client.Reader
	log        *slog.Logger
	metrics    *Metrics
}

// active reports whether req's namespace is annotated for bypass, and audits
// it when it is. Cluster-scoped objects are never bypassed. A namespace that
// cannot be read is treated as not bypassed: the rules decide.
func (b *bypass) active(ctx context.Context, req *admission.Request) bool {
	if req.Namespace == "" || b.namespaces == nil {
		return false
	}
	ns := &corev1.Namespace{}
	if err := b.namespaces.Get(ctx, client.ObjectKey{Name: req.Namespace}, ns); err != nil {
		if !apierrors.IsNotFound(err) {
			b.log.Error("cannot read namespace for the bypass check; evaluating rules", "namespace", req.Namespace, "error", err)
		}
		return false
	}
	if ns.Annotations[BypassAnnotation] != "true" {
		return false
	}
	b.metrics.Bypass.WithLabelValues(req.Namespace).Inc()
	b.log.Warn("admission bypassed",
		"audit", "admission-bypass",
		"annotation", BypassAnnotation,
		"uid", string(req.UID),
		"user", req.UserInfo.Username,
		"groups", req.UserInfo.Groups,
		"operation", string(req.Operation),
		"kind", req.Kind.Kind,
		"apiVersion", groupVersion(req.Kind.Group, req.Kind.Version),
		"namespace", req.Namespace,
		"name", req.Name,
		"dryRun", req.DryRun != nil && *req.DryRun,
	)
	return true
}
