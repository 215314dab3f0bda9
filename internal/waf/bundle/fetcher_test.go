package bundle_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/bundle/s3test"
	"github.com/vilaca/portal/internal/waf/cache"
)

func fmtInt(i int) string { return strconv.Itoa(i) }

func TestFetchVerifiesAndInstalls(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	data := doc(t, 1001)
	s.Put(t, bucket, "team-a/rules.json", data)
	f, m := fetcher(t, bundle.Options{URL: s.URL(), Source: bundle.StaticConfig{AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey}})

	res, err := f.Get(ctx(t), "ns/policy", "s3://"+bucket+"/team-a/rules.json", sum(data))
	if err != nil {
		t.Fatal(err)
	}
	if res.State != bundle.StateFresh || bundle.Reason(err) != bundle.ReasonProgrammed {
		t.Fatalf("state %s, reason %s", res.State, bundle.Reason(err))
	}
	c := cache.New(nil, nil)
	e := bundle.Install(c, cache.Key("ns", "policy"), res.Bundle)
	got, ok := c.Get(cache.Key("ns", "policy"))
	if !ok || got.UUID != e.UUID || got.Rules != res.Bundle.Rules || string(got.DataFiles["words.txt"]) != "attack\n" {
		t.Fatalf("cache serves %+v", got)
	}
	// A verified bundle is not fetched again.
	if _, err := f.Get(ctx(t), "ns/policy", "s3://"+bucket+"/team-a/rules.json", sum(data)); err != nil {
		t.Fatal(err)
	}
	if n := requests(m, bundle.OutcomeOK); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

func TestChecksumMismatchIsIntegrityErrorAndNotRetried(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	data := doc(t, 1002)
	s.Put(t, bucket, "rules.json", data)
	f, m := fetcher(t, bundle.Options{URL: s.URL(), Source: bundle.StaticConfig{AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey}})

	other := sum(doc(t, 9999))
	res, err := f.Get(ctx(t), "ns/policy", "s3://"+bucket+"/rules.json", other)
	var ie *bundle.IntegrityError
	if !errors.As(err, &ie) || ie.Want != other {
		t.Fatalf("error %v, want an IntegrityError", err)
	}
	// The error reaches the policy's status: it must not tell a tenant the
	// digest of an object it could then pin.
	if strings.Contains(err.Error(), sum(data)[:16]) {
		t.Fatalf("the error reveals the object's digest: %v", err)
	}
	if bundle.Reason(err) != bundle.ReasonIntegrityError || res.State != bundle.StateMissing {
		t.Fatalf("reason %s state %s", bundle.Reason(err), res.State)
	}
	if n := requests(m, bundle.OutcomeOK) + requests(m, bundle.OutcomeTransient) + requests(m, bundle.OutcomePermanent); n != 1 {
		t.Fatalf("%d requests for a checksum mismatch, want 1 (not retried)", n)
	}
	// Reconciles of policies pinning the wrong digest do not download the
	// object again while the refusal is remembered.
	for _, key := range []string{"ns/policy", "other/policy"} {
		if _, err := f.Get(ctx(t), key, "s3://"+bucket+"/rules.json", other); !errors.As(err, &ie) {
			t.Fatalf("again: %v, want the IntegrityError", err)
		}
	}
	if n := requests(m, bundle.OutcomeOK); n != 1 {
		t.Fatalf("%d downloads of a refused bundle, want 1", n)
	}
	// The right digest is not affected.
	if res, err := f.Get(ctx(t), "ns/policy", "s3://"+bucket+"/rules.json", sum(data)); err != nil || res.State != bundle.StateFresh {
		t.Fatalf("right digest: %s %v", res.State, err)
	}
}
