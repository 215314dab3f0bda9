package waf

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/bundle/s3test"
)

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
