package bundle_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/bundle/s3test"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

func rootCreds() bundle.StaticConfig {
	return bundle.StaticConfig{AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey}
}

// faulty is a reverse proxy in front of the real storage that answers the
// first n requests with status, and can strip Content-Length so the body
// is sent chunked.
type faulty struct {
	*httptest.Server
	fail     atomic.Int32
	status   int
	seen     atomic.Int32
	chunked  bool
	upstream *url.URL
}

func newFaulty(t *testing.T, upstream string, failFirst int, status int) *faulty {
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	f := &faulty{status: status, upstream: u}
	f.fail.Store(int32(failFirst))
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(r *http.Response) error {
		if f.chunked {
			r.Header.Del("Content-Length")
			r.ContentLength = -1
		}
		return nil
	}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.seen.Add(1)
		if f.fail.Add(-1) >= 0 {
			http.Error(w, "injected failure", f.status)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func TestServerErrorsAreRetriedWithBackoffThenSucceed(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	data := doc(t, 2001)
	s.Put(t, bucket, "rules.json", data)
	p := newFaulty(t, s.URL(), 2, http.StatusServiceUnavailable)
	f, m := fetcher(t, bundle.Options{URL: p.URL, Source: rootCreds(), Attempts: 4})

	res, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/rules.json", sum(data))
	if err != nil || res.State != bundle.StateFresh {
		t.Fatalf("state %s, error %v", res.State, err)
	}
	if got := requests(m, bundle.OutcomeTransient); got != 2 {
		t.Fatalf("%d transient failures counted, want 2", got)
	}
	if got := p.seen.Load(); got != 3 {
		t.Fatalf("storage saw %d requests, want 3 (two 503s retried, then success)", got)
	}
}

func TestServerErrorsGiveUpAfterAttempts(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	data := doc(t, 2002)
	s.Put(t, bucket, "rules.json", data)
	p := newFaulty(t, s.URL(), 100, http.StatusBadGateway)
	f, _ := fetcher(t, bundle.Options{URL: p.URL, Source: rootCreds(), Attempts: 3})

	res, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/rules.json", sum(data))
	var fe *bundle.FetchError
	if !errors.As(err, &fe) || fe.Status != http.StatusBadGateway || fe.Attempts != 3 || !fe.Transient {
		t.Fatalf("error %#v, want a transient FetchError after 3 attempts", err)
	}
	if res.State != bundle.StateMissing || bundle.Reason(err) != bundle.ReasonFetchError {
		t.Fatalf("state %s reason %s", res.State, bundle.Reason(err))
	}
	if got := p.seen.Load(); got != 3 {
		t.Fatalf("storage saw %d requests, want 3", got)
	}
}

func TestClientErrorsAreNotRetried(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	data := doc(t, 2003)
	s.Put(t, bucket, "rules.json", data)
	for name, tc := range map[string]struct {
		source   bundle.StaticConfig
		location string
		status   int
	}{
		"missing object": {rootCreds(), "s3://" + bucket + "/absent.json", http.StatusNotFound},
		"wrong secret":   {bundle.StaticConfig{AccessKeyID: s3test.AccessKey, SecretAccessKey: "wrong"}, "s3://" + bucket + "/rules.json", http.StatusForbidden},
	} {
		t.Run(name, func(t *testing.T) {
			p := newFaulty(t, s.URL(), 0, 0)
			f, m := fetcher(t, bundle.Options{URL: p.URL, Source: tc.source, Attempts: 5})
			_, err := f.Get(ctx(t), "ns/p", tc.location, sum(data))
			var fe *bundle.FetchError
			if !errors.As(err, &fe) || fe.Status != tc.status || fe.Transient {
				t.Fatalf("error %v, want a permanent FetchError with status %d", err, tc.status)
			}
			if got := p.seen.Load(); got != 1 {
				t.Fatalf("storage saw %d requests, want 1 (4xx is not retried)", got)
			}
			if got := requests(m, bundle.OutcomePermanent); got != 1 {
				t.Fatalf("%d permanent failures counted, want 1", got)
			}
		})
	}
}

func TestOversizedBundleIsRefused(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	big, err := bundle.Encode(ruleset.Bundle{
		Rules:     "SecRuleEngine On\n",
		DataFiles: map[string][]byte{"words.txt": []byte(strings.Repeat("attack\n", 4096))},
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Put(t, bucket, "big.json", big)
	for name, chunked := range map[string]bool{"with Content-Length": false, "chunked, no length": true} {
		t.Run(name, func(t *testing.T) {
			p := newFaulty(t, s.URL(), 0, 0)
			p.chunked = chunked
			f, _ := fetcher(t, bundle.Options{URL: p.URL, Source: rootCreds(), MaxBytes: 4096})
			res, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/big.json", sum(big))
			var tl *bundle.TooLargeError
			if !errors.As(err, &tl) || bundle.Reason(err) != bundle.ReasonBundleTooLarge || res.State != bundle.StateMissing {
				t.Fatalf("error %v state %s, want BundleTooLarge", err, res.State)
			}
			if got := p.seen.Load(); got != 1 {
				t.Fatalf("storage saw %d requests, want 1", got)
			}
		})
	}
}

func TestBundleOutsideTheSandboxIsRefused(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	data, err := bundle.Encode(ruleset.Bundle{Rules: "SecRuleEngine On\nSecAuditLog /etc/passwd\n"})
	if err != nil {
		t.Fatal(err)
	}
	s.Put(t, bucket, "evil.json", data)
	f, _ := fetcher(t, bundle.Options{URL: s.URL(), Source: rootCreds()})
	res, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/evil.json", sum(data))
	if bundle.Reason(err) != bundle.ReasonInvalidBundle || res.State != bundle.StateMissing || !strings.Contains(err.Error(), "sandbox") {
		t.Fatalf("error %v state %s, want InvalidBundle (sandbox)", err, res.State)
	}
}

func TestColdMissWhenStorageIsDown(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	data := doc(t, 2004)
	s.Put(t, bucket, "rules.json", data)
	s.Stop()
	f, m := fetcher(t, bundle.Options{URL: s.URL(), Source: rootCreds(), Attempts: 3, Dir: t.TempDir()})

	res, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/rules.json", sum(data))
	if res.State != bundle.StateMissing || bundle.Reason(err) != bundle.ReasonFetchError || res.Bundle.Rules != "" {
		t.Fatalf("state %s reason %s: a cold miss has nothing to enforce", res.State, bundle.Reason(err))
	}
	if got := requests(m, bundle.OutcomeTransient); got != 3 {
		t.Fatalf("%d transient failures, want 3 (connection refused is retried)", got)
	}
}

// Fetched bundles are held to --waf-max-data-file-bytes like RuleSets.
func TestBundleDataFileLimit(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	data := doc(t, 2101) // words.txt is 7 bytes
	s.Put(t, bucket, "rules.json", data)
	f, _ := fetcher(t, bundle.Options{URL: s.URL(), Source: rootCreds(), MaxDataFileBytes: 4})
	if _, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/rules.json", sum(data)); bundle.Reason(err) != bundle.ReasonInvalidBundle ||
		!strings.Contains(err.Error(), "--waf-max-data-file-bytes") {
		t.Fatalf("error %v, want InvalidBundle over the data file limit", err)
	}
	f, _ = fetcher(t, bundle.Options{URL: s.URL(), Source: rootCreds(), MaxDataFileBytes: 7})
	if _, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/rules.json", sum(data)); err != nil {
		t.Fatal(err)
	}
}
