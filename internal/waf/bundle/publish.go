package bundle

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// Uploader stores an object; the Fetcher is one.
type Uploader interface {
	Upload(ctx context.Context, loc Location, data []byte) error
}

// Publisher uploads each RuleSet's cached revision to storage as a bundle
// and writes where it is to status.bundle. Objects are content-addressed,
// s3://bucket/<prefix><namespace>/<name>/<sha256>.json, so an upload never
// replaces a bundle a consumer pins; old objects are left to the bucket's
// lifecycle rules. A RuleSet can publish only under its own namespace and
// name. It runs on the leader.
type Publisher struct {
	client   client.Client
	cache    *cache.Cache
	uploader Uploader
	bucket   string
	prefix   string
	metrics  *Metrics
	log      *slog.Logger
}

// NewPublisher returns a publisher into bucket under prefix ("" or ending
// in "/"), reading revisions from c.
func NewPublisher(cl client.Client, c *cache.Cache, up Uploader, bucket, prefix string, m *Metrics, log *slog.Logger) (*Publisher, error) {
	if _, err := ParseLocation("s3://" + bucket + "/" + prefix + "x"); err != nil {
		return nil, fmt.Errorf("bundle publish bucket %q and prefix %q: %w", bucket, prefix, err)
	}
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		return nil, fmt.Errorf("bundle publish prefix %q must end with /", prefix)
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Publisher{client: cl, cache: c, uploader: up, bucket: bucket, prefix: prefix, metrics: m, log: log}, nil
}

// SetupWithManager registers the publisher (leader only).
func (p *Publisher) SetupWithManager(mgr ctrl.Manager) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named("waf-ruleset-bundle-publisher").
		For(&wafv1alpha1.RuleSet{}).
		Complete(p)
	if err != nil {
		return fmt.Errorf("set up RuleSet bundle publisher: %w", err)
	}
	return nil
}

// cacheBehind is how soon to look again when this replica's cache has not
// caught up with the revision in status.
const cacheBehind = time.Second

// Reconcile publishes one RuleSet's cached revision.
func (p *Publisher) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var rs wafv1alpha1.RuleSet
	if err := p.client.Get(ctx, req.NamespacedName, &rs); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	rev := rs.Status.CachedRevision
	if rev == nil {
		st := wafv1alpha1.BundleStatus{State: wafv1alpha1.BundleStatePending}
		if c := meta.FindStatusCondition(rs.Status.Conditions, wafv1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionFalse {
			st = wafv1alpha1.BundleStatus{State: wafv1alpha1.BundleStateInvalid, Message: "the rule set has not compiled: " + c.Reason}
		}
		return ctrl.Result{}, p.write(ctx, &rs, st)
	}
	if b := rs.Status.Bundle; b != nil && b.State == wafv1alpha1.BundleStateReady && b.Revision == rev.UUID {
		return ctrl.Result{}, nil
	}
	entry, ok := p.cache.Get(cache.Key(rs.Namespace, rs.Name))
	if !ok || entry.UUID != rev.UUID {
		return ctrl.Result{RequeueAfter: cacheBehind}, nil
	}
	data, err := Encode(ruleset.Bundle{Rules: entry.Rules, DataFiles: entry.DataFiles})
	if err != nil {
		return ctrl.Result{}, err
	}
	sha := digest(data)
	loc := PublishedLocation(p.bucket, p.prefix, rs.Namespace, rs.Name, sha)
	if err := p.uploader.Upload(ctx, loc, data); err != nil {
		p.metrics.Publishes.WithLabelValues("error").Inc()
		p.log.Warn("RuleSet bundle not published", "namespace", rs.Namespace, "name", rs.Name, "location", loc.String(), "error", err)
		st := wafv1alpha1.BundleStatus{State: wafv1alpha1.BundleStateProcessing, Message: truncate("upload failed, retrying: " + err.Error())}
		if old := rs.Status.Bundle; old != nil {
			st.Location, st.SHA256, st.Revision = old.Location, old.SHA256, old.Revision
		}
		if werr := p.write(ctx, &rs, st); werr != nil {
			return ctrl.Result{}, werr
		}
		// The controller's rate limiter backs the retries off.
		return ctrl.Result{}, err
	}
	p.metrics.Publishes.WithLabelValues("ok").Inc()
	p.log.Info("RuleSet bundle published", "namespace", rs.Namespace, "name", rs.Name, "location", loc.String(), "sha256", sha)
	return ctrl.Result{}, p.write(ctx, &rs, wafv1alpha1.BundleStatus{
		State: wafv1alpha1.BundleStateReady, Location: loc.String(), SHA256: sha, Revision: rev.UUID,
	})
}

// write patches status.bundle alone.
func (p *Publisher) write(ctx context.Context, rs *wafv1alpha1.RuleSet, st wafv1alpha1.BundleStatus) error {
	if rs.Status.Bundle != nil && equality.Semantic.DeepEqual(*rs.Status.Bundle, st) {
		return nil
	}
	before := rs.DeepCopy()
	rs.Status.Bundle = &st
	if err := p.client.Status().Patch(ctx, rs, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("update status.bundle of RuleSet %s/%s: %w", rs.Namespace, rs.Name, err)
	}
	return nil
}

func truncate(s string) string {
	if len(s) <= 4096 {
		return s
	}
	return s[:4093] + "..."
}
