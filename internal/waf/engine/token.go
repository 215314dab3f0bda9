package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/cache"
)

// token is a cache token Portal minted for an Engine's WasmPlugin.
type token struct {
	value    string
	audience string
	// saUID is the ServiceAccount the token is bound to: a recreated
	// ServiceAccount invalidates it.
	saUID   types.UID
	expires time.Time
	renewAt time.Time
}

// tokenStore keeps the current token of each Engine. It lives in memory:
// a restarted Portal mints new tokens, which is cheap and leaves no secret
// at rest beyond the WasmPlugin that carries it.
type tokenStore struct {
	mu sync.Mutex
	m  map[types.UID]token
}

func newTokenStore() *tokenStore { return &tokenStore{m: map[types.UID]token{}} }

func (s *tokenStore) get(uid types.UID) (token, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.m[uid]
	return t, ok
}

func (s *tokenStore) put(uid types.UID, t token) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[uid] = t
}

func (s *tokenStore) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, uid)
}

// TokenAudience is the audience of the tokens an istio-wasm Engine's data
// plane shows the cache (the waf-proxy has ProxyTokenAudience): the
// Engine's own RuleSet only, so a token read from a
// WasmPlugin reads nothing else, and the ServiceAccount lives in the
// Engine's namespace, so the cache refuses it for any other namespace.
func TokenAudience(eng *wafv1alpha1.Engine) string {
	return cache.RuleSetAudience(eng.Namespace, eng.Spec.RuleSet.Name)
}

// ensureToken returns a token of sa for the audience, minting one
// (TokenRequest) when there is none, it is for another audience or
// ServiceAccount, or less than TokenRenewBefore is left of it.
func (r *Reconciler) ensureToken(ctx context.Context, eng *wafv1alpha1.Engine, sa *corev1.ServiceAccount, aud string) (token, error) {
	if t, ok := r.tokens.get(eng.UID); ok && t.audience == aud && t.saUID == sa.UID && r.opts.Clock.Now().Before(t.renewAt) {
		return t, nil
	}
	secs := int64(r.opts.TokenExpiration / time.Second)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{aud}, ExpirationSeconds: &secs,
	}}
	if err := r.client.SubResource("token").Create(ctx, sa, tr); err != nil {
		r.opts.Metrics.TokenRequests.WithLabelValues("error").Inc()
		return token{}, fmt.Errorf("request a cache token for ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	if tr.Status.Token == "" {
		r.opts.Metrics.TokenRequests.WithLabelValues("error").Inc()
		return token{}, fmt.Errorf("the TokenRequest for ServiceAccount %s/%s returned no token", sa.Namespace, sa.Name)
	}
	r.opts.Metrics.TokenRequests.WithLabelValues("ok").Inc()
	exp := tr.Status.ExpirationTimestamp.Time
	// The API server may shorten the lifetime asked for; renew relative
	// to what it granted.
	before := r.opts.TokenRenewBefore
	if life := exp.Sub(r.opts.Clock.Now()); before >= life {
		before = life / 5
	}
	t := token{value: tr.Status.Token, audience: aud, saUID: sa.UID, expires: exp, renewAt: exp.Add(-before)}
	r.tokens.put(eng.UID, t)
	return t, nil
}

func metaTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}
