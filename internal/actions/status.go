package actions

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	policyv1alpha1 "github.com/vilaca/portal/api/policy/v1alpha1"
	"github.com/vilaca/portal/internal/core"
)

// StatusFieldOwner is the server-side apply field manager of the
// ActionsReady condition.
const StatusFieldOwner = "portal-actions"

// StatusOptions configure Status.
type StatusOptions struct {
	// Client writes rule status and asks SelfSubjectAccessReviews.
	Client client.Client
	// Rules returns the loaded rules.
	Rules func() []*core.Rule
	// Layer is false when --actions is off: every rule with actions is
	// told so.
	Layer bool
	// Enabled are the action types --actions-enabled lets run.
	Enabled []string
	// DryRun is --actions-dry-run.
	DryRun bool
	// AlertSink is true when --alertmanager-url names an Alertmanager;
	// without one an alertmanager action has nowhere to send its alert.
	AlertSink bool
	Logger    *slog.Logger
}

// Status writes the ActionsReady condition of every PortalRule and
// PortalClusterRule with actions: True when they can all run, False with
// the reason when one cannot (the layer is off, the type is not enabled,
// Portal lacks the RBAC the action needs, checked once at start with
// SelfSubjectAccessReviews). It runs on the leader.
type Status struct {
	o       StatusOptions
	notify  chan struct{}
	limiter *rate.Limiter
	denied  map[string]string // action type: the missing permission
	written map[string]string // rule: the condition last written
}

// NewStatus returns the status writer; call Notify when the rules change.
func NewStatus(o StatusOptions) *Status {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Status{o: o, notify: make(chan struct{}, 1), limiter: rate.NewLimiter(20, 20), written: map[string]string{}}
	s.Notify()
	return s
}

// Notify asks for the conditions to be recomputed.
func (s *Status) Notify() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (*Status) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable.
func (s *Status) Start(ctx context.Context) error {
	if s.o.Layer {
		s.denied = s.checkRBAC(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.notify:
			s.writeAll(ctx)
		}
	}
}

// checkRBAC asks the API server whether Portal may make each request of
// each enabled action, cluster-wide.
func (s *Status) checkRBAC(ctx context.Context) map[string]string {
	denied := map[string]string{}
	for _, t := range s.o.Enabled {
		perms, _ := Permissions(t)
		for _, p := range perms {
			ra := p
			rev := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra}}
			if err := s.o.Client.Create(ctx, rev); err != nil {
				s.o.Logger.Warn("response action permission not checked", "action", t, "verb", p.Verb, "resource", p.Resource, "error", err)
				continue
			}
			if !rev.Status.Allowed {
				denied[t] = describePermission(p)
				s.o.Logger.Warn("response action lacks RBAC", "action", t, "missing", denied[t])
				break
			}
		}
	}
	return denied
}

func describePermission(p authorizationv1.ResourceAttributes) string {
	r := p.Resource
	if p.Subresource != "" {
		r += "/" + p.Subresource
	}
	if p.Group != "" {
		r += "." + p.Group
	}
	return p.Verb + " " + r
}

// Condition returns the ActionsReady condition of a rule with actions.
func (s *Status) Condition(r *core.Rule) (status, reason, message string) {
	var types []string
	for _, a := range r.Actions {
		if !slices.Contains(types, a.Type) {
			types = append(types, a.Type)
		}
	}
	if !s.o.Layer {
		return "False", policyv1alpha1.ReasonActionsLayerOff, "the actions layer is off (--actions): none of " + strings.Join(types, ", ") + " runs"
	}
	var off, denied []string
	noSink := false
	for _, t := range types {
		switch {
		case !slices.Contains(s.o.Enabled, t):
			off = append(off, t)
		case t == "alertmanager" && !s.o.AlertSink:
			noSink = true
		case s.denied[t] != "":
			denied = append(denied, fmt.Sprintf("%s (missing %s)", t, s.denied[t]))
		}
	}
	switch {
	case len(off) > 0:
		return "False", policyv1alpha1.ReasonActionDisabled, "not enabled by --actions-enabled: " + strings.Join(off, ", ")
	case noSink:
		return "False", policyv1alpha1.ReasonActionDisabled, "alertmanager has no Alertmanager to send to (--alertmanager-url is empty)"
	case len(denied) > 0:
		return "False", policyv1alpha1.ReasonActionNotPermitted, "Portal's RBAC does not allow: " + strings.Join(denied, "; ")
	case s.o.DryRun:
		return "True", policyv1alpha1.ReasonActionsDryRun, "every action runs in dry-run (--actions-dry-run): logged, not done"
	}
	return "True", policyv1alpha1.ReasonActionsRunnable, "every action can run: " + strings.Join(types, ", ")
}

func (s *Status) writeAll(ctx context.Context) {
	rules := s.o.Rules()
	// A rule deleted and created again under its name starts with no
	// condition: forgetting what was written for rules that are gone makes
	// the new one get its condition.
	loaded := make(map[string]bool, len(rules))
	for _, r := range rules {
		loaded[statusID(r)] = true
	}
	for id := range s.written {
		if !loaded[id] {
			delete(s.written, id)
		}
	}
	for _, r := range rules {
		kind := r.Source.Kind
		if len(r.Actions) == 0 || (kind != "PortalRule" && kind != "PortalClusterRule") {
			continue
		}
		st, reason, msg := s.Condition(r)
		id := statusID(r)
		if s.written[id] == st+reason+msg {
			continue
		}
		if err := s.limiter.Wait(ctx); err != nil {
			return
		}
		if err := s.write(ctx, r, st, reason, msg); err != nil {
			if !apierrors.IsNotFound(err) {
				s.o.Logger.Warn("ActionsReady condition not written", "rule", r.Source.String(), "error", err)
			}
			continue
		}
		s.written[id] = st + reason + msg
	}
}

// statusID names the object whose status a rule's condition is written to.
func statusID(r *core.Rule) string {
	return r.Source.Kind + "/" + r.Namespace + "/" + r.Name
}

func (s *Status) write(ctx context.Context, r *core.Rule, st, reason, msg string) error {
	patch, err := json.Marshal(map[string]any{
		"apiVersion": policyv1alpha1.GroupVersion.String(),
		"kind":       r.Source.Kind,
		"metadata":   map[string]any{"name": r.Source.Name, "namespace": r.Source.Namespace},
		"status": map[string]any{"conditions": []any{map[string]any{
			"type": policyv1alpha1.ConditionActionsReady, "status": st, "reason": reason, "message": msg,
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}}},
	})
	if err != nil {
		return err
	}
	var obj client.Object = &policyv1alpha1.PortalClusterRule{}
	if r.Source.Kind == "PortalRule" {
		obj = &policyv1alpha1.PortalRule{}
	}
	obj.SetNamespace(r.Source.Namespace)
	obj.SetName(r.Source.Name)
	return s.o.Client.Status().Patch(ctx, obj, client.RawPatch(types.ApplyPatchType, patch), client.FieldOwner(StatusFieldOwner), client.ForceOwnership)
}
