//go:build linux

package admission_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	portaladmission "github.com/vilaca/portal/internal/admission"
	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/devcluster"
	"github.com/vilaca/portal/internal/engine"
	"github.com/vilaca/portal/internal/expr/exprlang"
	"github.com/vilaca/portal/internal/manager"
	"github.com/vilaca/portal/internal/rule"
)

// direct is the in-handler decision measured in this process, without the
// histogram's buckets: Portal's webhook handler (the span the
// portal_admission_latency_seconds histogram times: break-glass check,
// decoding the object, evaluating the rules, the verdict) and, of that, the
// rule evaluation alone, called one after the other on a pod the API server
// stored during the run.
type direct struct {
	handler, evaluate latencies
	objectBytes       int
	// managedFieldsBytes is the part of objectBytes that is
	// metadata.managedFields, which no rule reads.
	managedFieldsBytes int
}

// measureDirect runs Portal's handler n times on the first pod of (b), as
// the API server sent it: the stored object, with the managedFields, uid and
// defaults admission sees. The namespace for the break-glass check comes from
// an informer cache, as in Portal.
func measureDirect(ctx context.Context, restCfg *rest.Config, cs kubernetes.Interface, namespace string, n int) (*direct, error) {
	name, raw, mf, err := directPod(ctx, cs, namespace)
	if err != nil {
		return nil, err
	}
	eng, err := podSecurityEngine()
	if err != nil {
		return nil, err
	}
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	wh, err := startDirectWebhook(cctx, restCfg, eng)
	if err != nil {
		return nil, err
	}
	req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID:       "00000000-0000-0000-0000-000000000000",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: namespace,
		Name:      name,
		Operation: admissionv1.Create,
		UserInfo:  authenticationv1.UserInfo{Username: "admin", Groups: []string{"system:masters", "system:authenticated"}},
		Object:    runtime.RawExtension{Raw: raw},
	}}
	// The first call fills the cache's namespace informer.
	if resp := wh.Handle(ctx, req); !resp.Allowed {
		return nil, fmt.Errorf("direct: the pod was not admitted: %v", resp.Result)
	}
	handler, evaluate, err := timeDirect(ctx, wh, eng, req, n)
	if err != nil {
		return nil, err
	}
	return &direct{handler: summarise(handler), evaluate: summarise(evaluate), objectBytes: len(raw), managedFieldsBytes: len(mf)}, nil
}

// directPod returns the name of a pod the run created, its JSON as the API
// server sends it to a webhook, and the JSON of its managed fields.
func directPod(ctx context.Context, cs kubernetes.Interface, namespace string) (name string, raw, managedFields []byte, err error) {
	pod, err := cs.CoreV1().Pods(namespace).Get(ctx, "r00-0000", metav1.GetOptions{})
	if err != nil {
		return "", nil, nil, err
	}
	pod.ResourceVersion = "" // not yet set at admission
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		return "", nil, nil, err
	}
	u["apiVersion"], u["kind"] = "v1", "Pod"
	raw, err = json.Marshal(u)
	if err != nil {
		return "", nil, nil, err
	}
	mf, err := json.Marshal(pod.ManagedFields)
	if err != nil {
		return "", nil, nil, err
	}
	return pod.Name, raw, mf, nil
}

// podSecurityEngine is an engine with the pod-security example rules.
func podSecurityEngine() (*engine.Engine, error) {
	root, err := devcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	eng := engine.New(exprlang.New())
	dir := filepath.Join(root, "examples", "rules", "pod-security")
	rules, errs := rule.LoadPaths(eng, []string{filepath.Join(dir, "baseline"), filepath.Join(dir, "restricted")})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	eng.SetRules(rules)
	return eng, nil
}

// startDirectWebhook builds Portal's admission handler around eng, with a
// cache of the cluster that runs until ctx ends.
func startDirectWebhook(ctx context.Context, restCfg *rest.Config, eng *engine.Engine) (*portaladmission.Webhook, error) {
	scheme, err := manager.Scheme()
	if err != nil {
		return nil, err
	}
	c, err := cache.New(restCfg, cache.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	go func() { _ = c.Start(ctx) }()
	return portaladmission.New(portaladmission.Options{
		Evaluator:  eng,
		Namespaces: c,
		Logger:     slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Registerer: prometheus.NewRegistry(),
	})
}

// timeDirect times n calls of the handler with req, and n evaluations of
// its object by the engine alone.
func timeDirect(ctx context.Context, wh *portaladmission.Webhook, eng *engine.Engine, req admission.Request, n int) (handler, evaluate []time.Duration, err error) {
	var m map[string]any
	if err := utiljson.Unmarshal(req.Object.Raw, &m); err != nil {
		return nil, nil, err
	}
	obj := &unstructured.Unstructured{Object: m}
	opts := engine.Options{Mode: core.ModeAdmission, Request: &core.Request{Operation: "CREATE"}}

	handler = make([]time.Duration, n)
	evaluate = make([]time.Duration, n)
	for i := range n {
		t0 := time.Now()
		resp := wh.Handle(ctx, req)
		handler[i] = time.Since(t0)
		if !resp.Allowed {
			return nil, nil, fmt.Errorf("direct: the pod was not admitted: %v", resp.Result)
		}
		t0 = time.Now()
		if _, err := eng.Evaluate(context.Background(), obj, opts); err != nil {
			return nil, nil, err
		}
		evaluate[i] = time.Since(t0)
	}
	return handler, evaluate, nil
}
