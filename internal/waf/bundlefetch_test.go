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

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	wafv1alpha1 "github.com/vilaca/portal/api/waf/v1alpha1"
	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/bundle/s3test"
	"github.com/vilaca/portal/internal/waf/cache"
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

// letOneGo lets one held request through, once one is held, and returns
// when it no longer counts as held.
func (g *gate) letOneGo(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	before := g.passed
	g.mu.Unlock()
	g.release <- struct{}{}
	poll(t, "the released request passes the gate", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.passed > before
	})
}

// letAllGo lets every request through, now and from now on.
func (g *gate) letAllGo() { g.opened.Do(func() { close(g.open) }) }

func (g *gate) counts() (held, peak int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held, g.peak
}

// answered counts the answers with status for the object key of bucket.
func (g *gate) answered(bucket, key string, status int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.statuses["/"+bucket+"/"+key][status]
}

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

// Policies of one namespace pinning wrong digests of large objects do not
// make a replica download them all at once: at most half of the fetch
// slots go to one namespace, the rest wait (saying so, not failing), and
// another namespace's policy gets its bundle meanwhile.
func TestBundleFetchesBoundedPerNamespace(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, "bundles")
	big := []byte(strings.Repeat("x", 1<<20))
	const n = 12
	for i := range n {
		s.Put(t, "bundles", fmt.Sprintf("evil/big-%d.json", i), big)
	}
	good := storeBundle(t, s, "shop/rules.json", 7101)
	g := newGate(t, s.URL(), func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/bundles/evil/") })
	a, _ := newBundleAdapter(t, g.URL(), "")
	perNamespace := bundle.DefaultFetchConcurrency / 2

	evil := func(i int) (types.NamespacedName, string) {
		return types.NamespacedName{Namespace: "evil", Name: fmt.Sprint("p", i)}, fmt.Sprintf("s3://bundles/evil/big-%d.json", i)
	}
	for i := range n {
		p, loc := evil(i)
		a.Bundle(p, loc, wrongPin(i))
	}
	poll(t, "evil's first downloads reach storage", func() bool { held, _ := g.counts(); return held >= perNamespace })

	// Another namespace is not held up by evil's downloads.
	enforce(t, a, types.NamespacedName{Namespace: "shop", Name: "p"}, good)
	if _, peak := g.counts(); peak > perNamespace {
		t.Fatalf("%d of one namespace's bundles downloaded at once, want at most %d", peak, perNamespace)
	}
	p, loc := evil(n - 1)
	if ok, reason, msg := reasonOf(a, p, loc, wrongPin(n-1)); ok || reason != wafv1alpha1.ReasonPending || !strings.Contains(msg, "waiting to fetch bundle") {
		t.Errorf("a queued policy reports %v %s %q, want Pending and that it is waiting", ok, reason, msg)
	}

	g.letAllGo()
	for i := range n {
		p, loc := evil(i)
		poll(t, p.String()+" refused", func() bool {
			_, reason, _ := reasonOf(a, p, loc, wrongPin(i))
			return reason == bundle.ReasonIntegrityError
		})
	}
	if _, peak := g.counts(); peak > perNamespace {
		t.Fatalf("%d of one namespace's bundles downloaded at once, want at most %d", peak, perNamespace)
	}
}

// Two namespaces holding every fetch slot do not starve a third: the first
// slot to free goes to the namespace with no fetch running.
func TestBundleFetchSlotsGoToWaitingNamespacesFirst(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, "bundles")
	for _, ns := range []string{"a", "b"} {
		for i := range 3 {
			s.Put(t, "bundles", fmt.Sprintf("%s/big-%d.json", ns, i), []byte("not the pinned bundle"))
		}
	}
	good := storeBundle(t, s, "shop/rules.json", 7102)
	g := newGate(t, s.URL(), func(r *http.Request) bool { return !strings.HasPrefix(r.URL.Path, "/bundles/shop/") })
	a, _ := newBundleAdapter(t, g.URL(), "")
	total := bundle.DefaultFetchConcurrency

	for _, ns := range []string{"a", "b"} {
		for i := range 3 {
			a.Bundle(types.NamespacedName{Namespace: ns, Name: fmt.Sprint("p", i)}, fmt.Sprintf("s3://bundles/%s/big-%d.json", ns, i), wrongPin(i))
		}
	}
	poll(t, "every fetch slot taken", func() bool { held, _ := g.counts(); return held >= total })
	shop := types.NamespacedName{Namespace: "shop", Name: "p"}
	if ok, reason, msg := reasonOf(a, shop, good.loc, good.sha); ok || reason != wafv1alpha1.ReasonPending || !strings.Contains(msg, "waiting to fetch bundle") {
		t.Errorf("with every slot taken the policy reports %v %s %q, want Pending and that it is waiting", ok, reason, msg)
	}
	if _, peak := g.counts(); peak > total {
		t.Fatalf("%d bundles downloaded at once, want at most %d", peak, total)
	}
	// One of a's or b's downloads ends: its slot goes to shop, not to a's
	// or b's third policy. Every slot is taken again only once shop's
	// fetch has ended too, and it ends with its result stored, so seeing
	// the slots full before shop has its bundle means the slot went
	// elsewhere.
	g.letOneGo(t)
	var ok bool
	poll(t, "a slot freed and taken again", func() bool {
		held, _ := g.counts()
		ok, _, _ = reasonOf(a, shop, good.loc, good.sha)
		return ok || held >= total
	})
	if !ok {
		t.Fatal("the freed slot went to a namespace with fetches running, not to the one waiting with none")
	}
	g.letAllGo()
	if _, peak := g.counts(); peak > total {
		t.Fatalf("%d bundles downloaded at once, want at most %d", peak, total)
	}
}

// Policies pinning different wrong digests of one object download it once:
// later ones ask storage only whether it changed (If-None-Match). A
// replaced object is downloaded again, and its new digest is enforced.
func TestWrongPinsOfOneObjectDownloadItOnce(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, "bundles")
	b := storeBundle(t, s, "shop/big.json", 7103)
	g := newGate(t, s.URL(), func(*http.Request) bool { return false })
	a, _ := newBundleAdapter(t, g.URL(), "")
	const n = 8
	pol := func(i int) types.NamespacedName {
		return types.NamespacedName{Namespace: "shop", Name: fmt.Sprint("p", i)}
	}
	for i := range n {
		a.Bundle(pol(i), b.loc, wrongPin(i))
	}
	for i := range n {
		poll(t, pol(i).String()+" refused", func() bool {
			_, reason, _ := reasonOf(a, pol(i), b.loc, wrongPin(i))
			return reason == bundle.ReasonIntegrityError
		})
	}
	if got := g.answered("bundles", "shop/big.json", http.StatusOK); got != 1 {
		t.Fatalf("the object was downloaded %d times for %d wrong pins, want once", got, n)
	}
	// The object is replaced: a policy pinning the new digest gets it, the
	// unchanged answers of before notwithstanding.
	nb := storeBundle(t, s, "shop/big.json", 7104)
	enforce(t, a, pol(n), nb)
}

// Policies pinning different wrong digests of one object while it is being
// downloaded share that download. Storage holds the unconditional GETs of
// the object: a second one would wait there, and its policy never get an
// answer.
func TestConcurrentWrongPinsShareOneDownload(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, "bundles")
	b := storeBundle(t, s, "shop/big.json", 7105)
	g := newGate(t, s.URL(), func(r *http.Request) bool {
		return r.URL.Path == "/bundles/shop/big.json" && r.Header.Get("If-None-Match") == ""
	})
	a, _ := newBundleAdapter(t, g.URL(), "")
	pol := func(i int) types.NamespacedName {
		return types.NamespacedName{Namespace: "shop", Name: fmt.Sprint("p", i)}
	}
	for i := range 2 {
		a.Bundle(pol(i), b.loc, wrongPin(i))
	}
	poll(t, "both fetches running, one download held", func() bool {
		held, _ := g.counts()
		return held >= 1 && testutil.ToFloat64(a.metrics.Fetches.WithLabelValues(bundle.FetchRunning)) == 2
	})
	g.letOneGo(t)
	for i := range 2 {
		poll(t, pol(i).String()+" refused", func() bool {
			_, reason, _ := reasonOf(a, pol(i), b.loc, wrongPin(i))
			return reason == bundle.ReasonIntegrityError
		})
	}
	if got := g.answered("bundles", "shop/big.json", http.StatusOK); got != 1 {
		t.Fatalf("the object was downloaded %d times, want once", got)
	}
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
	a, c := newBundleAdapterWith(t, g.URL(), "", access, bundle.DefaultFetchConcurrency)

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
		return ok && reason == bundle.ReasonStaleBundle && rs.Name == cache.BundleName(own.sha)
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
