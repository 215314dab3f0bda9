package waf

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/bundle/s3test"
)

// gate is a proxy in front of the test storage that holds the GETs of the
// objects hold picks until the test lets them go, and counts them: how many
// are in flight (held or being answered), the most ever in flight, and the
// answers by status.
type gate struct {
	srv     *httptest.Server
	hold    func(r *http.Request) bool
	release chan struct{}
	open    chan struct{}
	opened  sync.Once

	proxy *httputil.ReverseProxy

	mu sync.Mutex
	// held are at the gate, passed went through it, inFlight are held or
	// being answered, peak is the most ever in flight.
	held, passed, inFlight, peak int
	statuses                     map[string]map[int]int
	requests                     map[string]int
}

func newGate(t *testing.T, storage string, hold func(r *http.Request) bool) *gate {
	t.Helper()
	u, err := url.Parse(storage)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{hold: hold, release: make(chan struct{}), open: make(chan struct{}),
		statuses: map[string]map[int]int{}, requests: map[string]int{}, proxy: httputil.NewSingleHostReverseProxy(u)}
	g.srv = httptest.NewServer(g)
	t.Cleanup(func() {
		g.letAllGo()
		g.srv.Close()
	})
	return g
}

func (g *gate) URL() string { return g.srv.URL }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.requests[r.URL.Path]++
	g.mu.Unlock()
	if r.Method == http.MethodGet && g.hold(r) {
		g.mu.Lock()
		g.held++
		g.inFlight++
		g.peak = max(g.peak, g.inFlight)
		g.mu.Unlock()
		select {
		case <-g.release:
		case <-g.open:
		case <-r.Context().Done():
		}
		g.mu.Lock()
		g.held--
		g.passed++
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			g.inFlight--
			g.mu.Unlock()
		}()
	}
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	g.proxy.ServeHTTP(rec, r)
	g.mu.Lock()
	if g.statuses[r.URL.Path] == nil {
		g.statuses[r.URL.Path] = map[int]int{}
	}
	g.statuses[r.URL.Path][rec.status]++
	g.mu.Unlock()
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// letAllGo lets every request through, now and from now on.
func (g *gate) letAllGo() { g.opened.Do(func() { close(g.open) }) }

// requestsUnder counts the requests for keys under prefix of bucket.
func (g *gate) requestsUnder(bucket, prefix string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for p, c := range g.requests {
		if strings.HasPrefix(p, "/"+bucket+"/"+prefix) {
			n += c
		}
	}
	return n
}

// poll waits, up to a generous deadline, until cond holds.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wrongPin is a digest no test object has.
func wrongPin(i int) string { return fmt.Sprintf("%064x", i+1) }

// reasonOf asks for policy's bundle and returns the reason and message.
func reasonOf(a *bundleAdapter, policy types.NamespacedName, loc, sha string) (ok bool, reason, msg string) {
	_, ok, reason, msg = a.Bundle(policy, loc, sha)
	return ok, reason, msg
}

// A policy may read only its own namespace's keys (and shared ones the
// operator allows): another team's bundle is refused before storage is
// asked, even with its right digest, so the answer does not depend on the
// object existing; a policy that had a bundle keeps it.
func TestBundleLocationsConfinedToNamespace(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, "bundles")
	victim := storeBundle(t, s, "tenants/team-a/prod.json", 7201)
	own := storeBundle(t, s, "tenants/evil/ok.json", 7202)
	shared := storeBundle(t, s, "shared/crs.json", 7203)
	g := newGate(t, s.URL(), func(*http.Request) bool { return false })
	access, err := bundle.NewAccess([]string{"s3://bundles/tenants/"}, []string{"s3://bundles/shared/"})
	if err != nil {
		t.Fatal(err)
	}
	a, c := newBundleAdapterWith(t, g.URL(), "", access)

	evil, q := types.NamespacedName{Namespace: "evil", Name: "p"}, types.NamespacedName{Namespace: "evil", Name: "q"}
	refused := func(p types.NamespacedName, loc, sha string) string {
		t.Helper()
		var msg string
		poll(t, loc+" refused", func() bool {
			ok, reason, m := reasonOf(a, p, loc, sha)
			msg = m
			return !ok && reason == bundle.ReasonLocationNotAllowed
		})
		return msg
	}
	msg := refused(q, victim.loc, victim.sha)
	if !strings.Contains(msg, "s3://bundles/tenants/evil/") || !strings.Contains(msg, "s3://bundles/shared/") {
		t.Errorf("the refusal %q does not name what namespace evil may read", msg)
	}
	absent := "s3://bundles/tenants/team-a/absent.json"
	if m := refused(q, absent, victim.sha); strings.ReplaceAll(m, absent, "LOC") != strings.ReplaceAll(msg, victim.loc, "LOC") {
		t.Errorf("refusals differ for an object that exists (%q) and one that does not (%q)", msg, m)
	}
	refused(q, "s3://bundles/tenants/evil-2/x.json", victim.sha)
	refused(q, "s3://other/tenants/evil/x.json", victim.sha)
	if n := g.requestsUnder("bundles", "tenants/team-a/") + g.requestsUnder("bundles", "tenants/evil-2/") + g.requestsUnder("other", ""); n != 0 {
		t.Fatalf("%d requests reached storage for locations namespace evil may not read", n)
	}
	if _, ok := c.Get(victim.cacheKey("evil")); ok {
		t.Fatal("team-a's bundle is in the rule set cache under namespace evil")
	}

	// Its own keys and the shared ones it may read; team-a reads its own.
	enforce(t, a, types.NamespacedName{Namespace: "team-a", Name: "p"}, victim)
	enforce(t, a, types.NamespacedName{Namespace: "evil", Name: "shared"}, shared)
	enforce(t, a, evil, own)
	// Moving to a location it may not read keeps the last good bundle.
	poll(t, "stale", func() bool {
		rs, ok, reason, _ := a.Bundle(evil, victim.loc, victim.sha)
		return ok && reason == bundle.ReasonStaleBundle && rs.Name == "bundle-"+own.sha[:20]
	})
}

// A policy pinning a wrong digest learns that it is wrong, not what the
// object's digest is: with the digest, it could pin an object it cannot
// otherwise know and have Portal serve it.
func TestIntegrityErrorDoesNotRevealDigest(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, "bundles")
	b := storeBundle(t, s, "evil/prod.json", 7301)
	a, _ := newBundleAdapter(t, s.URL(), "")
	p := types.NamespacedName{Namespace: "evil", Name: "p"}
	var msg string
	poll(t, "refused", func() bool {
		_, reason, m := reasonOf(a, p, b.loc, wrongPin(0))
		msg = m
		return reason == bundle.ReasonIntegrityError
	})
	if strings.Contains(msg, b.sha[:16]) {
		t.Fatalf("the status message reveals the object's digest: %q", msg)
	}
	if !strings.Contains(msg, wrongPin(0)) {
		t.Errorf("the status message %q does not name the pinned digest", msg)
	}
}
