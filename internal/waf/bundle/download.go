package bundle

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/waf/ruleset"
)

type refusal struct {
	err   error
	until time.Time
}

// maxRefused bounds the refusals remembered; past it expired ones go, then
// any.
const maxRefused = 4096

// refusedBefore returns the remembered refusal of id, if it has not
// expired.
func (f *Fetcher) refusedBefore(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.refused[id]
	if !ok {
		return nil
	}
	if f.clock.Now().After(r.until) {
		delete(f.refused, id)
		return nil
	}
	return r.err
}

// refuse remembers err for id when it is about the content, which fetching
// again would download again to the same end.
func (f *Fetcher) refuse(id string, err error) {
	var (
		ie *IntegrityError
		tl *TooLargeError
		iv *InvalidError
	)
	if !errors.As(err, &ie) && !errors.As(err, &tl) && !errors.As(err, &iv) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clock.Now()
	if len(f.refused) >= maxRefused {
		for k, r := range f.refused {
			if now.After(r.until) || len(f.refused) >= maxRefused {
				delete(f.refused, k)
			}
		}
	}
	f.refused[id] = refusal{err: err, until: now.Add(f.opts.RefusalTTL)}
}

// fetch downloads loc, verifies it against sha and decodes it.
func (f *Fetcher) fetch(ctx context.Context, loc Location, sha string) (ruleset.Bundle, error) {
	start := time.Now()
	obj, err := f.object(ctx, loc, f.unchangedUnless(loc, sha))
	if err == nil && obj.data == nil && obj.digest == sha {
		// Storage said unchanged, yet the object seen before is the one
		// pinned: an ETag that does not track the content. Download it.
		obj, err = f.object(ctx, loc, seenObject{})
	}
	if err != nil {
		return ruleset.Bundle{}, err
	}
	if obj.digest != sha {
		return ruleset.Bundle{}, &IntegrityError{Location: loc.String(), Want: sha}
	}
	b, err := f.decode(obj.data)
	if err != nil {
		return ruleset.Bundle{}, &InvalidError{Err: fmt.Errorf("bundle %s: %w", loc, err)}
	}
	f.opts.Metrics.FetchDuration.Observe(time.Since(start).Seconds())
	if f.store != nil {
		if err := f.store.saveBlob(sha, obj.data); err != nil {
			f.opts.Metrics.StoreErrors.Inc()
			f.opts.Logger.Warn("bundle not persisted", "location", loc.String(), "sha256", sha, "error", err)
		}
	}
	return b, nil
}

// object is what storage answered for a location: the bytes and their
// digest, or, when it said the object seen before is unchanged, only that
// object's digest (data nil).
type object struct {
	data         []byte
	digest, etag string
}

// seenObject is the digest and ETag of the object last downloaded from a
// location.
type seenObject struct {
	digest, etag string
}

// unchangedUnless returns the object last seen at loc when its digest is
// not sha, so that the request asks storage only whether it changed: a pin
// that is not the object's digest then costs a request, not a download of
// up to --bundle-max-bytes. Zero when a download is needed anyway.
func (f *Fetcher) unchangedUnless(loc Location, sha string) seenObject {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.seen[loc.String()]; ok && s.digest != sha && s.etag != "" {
		return s
	}
	return seenObject{}
}

// object returns what storage holds at loc, asking only whether it changed
// when unless is set. Requests for one location and condition share one
// download, whatever sha256 their callers pin: policies pinning different
// digests of one object do not download it once each.
func (f *Fetcher) object(ctx context.Context, loc Location, unless seenObject) (object, error) {
	v, err, _ := f.downloads.Do(loc.String()+" "+unless.etag, func() (any, error) {
		return f.download(ctx, loc, unless)
	})
	if err != nil {
		return object{}, err
	}
	return v.(object), nil
}

// errUnchanged: storage answered 304 to a conditional request.
var errUnchanged = errors.New("not modified")

func (f *Fetcher) download(ctx context.Context, loc Location, unless seenObject) (object, error) {
	var obj object
	err := f.retry(ctx, "get", loc, func(ctx context.Context, cl *s3.Client) error {
		in := &s3.GetObjectInput{Bucket: aws.String(loc.Bucket), Key: aws.String(loc.Key)}
		if unless.etag != "" {
			in.IfNoneMatch = aws.String(unless.etag)
		}
		out, err := cl.GetObject(ctx, in)
		if err != nil {
			if status, _ := classify(err); status == http.StatusNotModified && unless.etag != "" {
				return errUnchanged
			}
			return err
		}
		defer out.Body.Close()
		if out.ContentLength != nil && *out.ContentLength > f.opts.MaxBytes {
			return &TooLargeError{Location: loc.String(), Limit: f.opts.MaxBytes}
		}
		// The length header may be absent or wrong: read one byte past the
		// cap to know.
		data, err := io.ReadAll(io.LimitReader(out.Body, f.opts.MaxBytes+1))
		if err != nil {
			return err
		}
		if int64(len(data)) > f.opts.MaxBytes {
			return &TooLargeError{Location: loc.String(), Limit: f.opts.MaxBytes}
		}
		obj = object{data: data, digest: digest(data), etag: aws.ToString(out.ETag)}
		return nil
	})
	if errors.Is(err, errUnchanged) {
		return object{digest: unless.digest}, nil
	}
	if err != nil {
		return object{}, err
	}
	f.see(loc, obj)
	return obj, nil
}

// see remembers the digest and ETag of what was downloaded from loc, at
// most maxRefused locations. The digest stays in memory: it is never
// reported (see IntegrityError).
func (f *Fetcher) see(loc Location, obj object) {
	if obj.etag == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.seen[loc.String()]; !ok && len(f.seen) >= maxRefused {
		for k := range f.seen {
			delete(f.seen, k)
			break
		}
	}
	f.seen[loc.String()] = seenObject{digest: obj.digest, etag: obj.etag}
}

// Upload stores data at loc, with the same retries as a fetch.
func (f *Fetcher) Upload(ctx context.Context, loc Location, data []byte) error {
	return f.retry(ctx, "put", loc, func(ctx context.Context, cl *s3.Client) error {
		_, err := cl.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(loc.Bucket), Key: aws.String(loc.Key), Body: bytes.NewReader(data),
			ContentLength: aws.Int64(int64(len(data))), ContentType: aws.String(ContentType),
		})
		return err
	})
}

// retry runs op until it succeeds, fails permanently, or Attempts run out,
// backing off exponentially between transient failures.
func (f *Fetcher) retry(ctx context.Context, op string, loc Location, do func(context.Context, *s3.Client) error) error {
	backoff := wait.Backoff{Duration: f.opts.InitialBackoff, Factor: 2, Jitter: 0.2, Steps: f.opts.Attempts, Cap: f.opts.MaxBackoff}
	for attempt := 1; ; attempt++ {
		cl, err := f.s3()
		if err != nil {
			return &FetchError{Location: loc.String(), Attempts: attempt - 1, Err: err}
		}
		actx, cancel := context.WithTimeout(ctx, f.opts.AttemptTimeout)
		err = do(actx, cl)
		cancel()
		if err == nil {
			f.opts.Metrics.Requests.WithLabelValues(op, OutcomeOK).Inc()
			return nil
		}
		if errors.Is(err, errUnchanged) {
			f.opts.Metrics.Requests.WithLabelValues(op, OutcomeUnchanged).Inc()
			return err
		}
		var tl *TooLargeError
		if errors.As(err, &tl) {
			f.opts.Metrics.Requests.WithLabelValues(op, OutcomePermanent).Inc()
			return err
		}
		status, transient := classify(err)
		fe := &FetchError{Location: loc.String(), Status: status, Attempts: attempt, Transient: transient, Err: err}
		if !transient || ctx.Err() != nil {
			f.opts.Metrics.Requests.WithLabelValues(op, OutcomePermanent).Inc()
			return fe
		}
		f.opts.Metrics.Requests.WithLabelValues(op, OutcomeTransient).Inc()
		if attempt >= f.opts.Attempts {
			return fe
		}
		f.opts.Logger.Debug("bundle storage request failed, retrying", "op", op, "location", loc.String(), "attempt", attempt, "error", err)
		t := time.NewTimer(backoff.Step())
		select {
		case <-ctx.Done():
			t.Stop()
			return fe
		case <-t.C:
		}
	}
}

// classify returns the HTTP status of err (0 for none) and whether trying
// again may help: network errors, 5xx, 408 and 429 may; other answers and
// a certificate that does not verify will not within a fetch.
func classify(err error) (status int, transient bool) {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
		if status >= 500 || status == http.StatusRequestTimeout || status == http.StatusTooManyRequests {
			return status, true
		}
		if status != 0 {
			return status, false
		}
	}
	var (
		cv *tls.CertificateVerificationError
		ua x509.UnknownAuthorityError
		hn x509.HostnameError
		ci x509.CertificateInvalidError
	)
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) {
		return 0, false
	}
	return 0, true
}

// s3 returns the S3 client for the current Config, building a new one
// (new transport, so new TLS sessions) when the Secrets changed.
func (f *Fetcher) s3() (*s3.Client, error) {
	v := f.opts.Source.Version()
	f.cmu.Lock()
	defer f.cmu.Unlock()
	if f.client != nil && v == f.version {
		return f.client, nil
	}
	cfg, err := f.opts.Source.Config()
	if err != nil {
		f.opts.Metrics.ClientReloads.WithLabelValues("error").Inc()
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg.TLS()
	tr.ResponseHeaderTimeout = 30 * time.Second
	var creds aws.CredentialsProvider = aws.AnonymousCredentials{}
	if cfg.AccessKeyID != "" {
		creds = credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, "")
	}
	cl := s3.New(s3.Options{
		BaseEndpoint: aws.String(f.opts.URL),
		Region:       f.opts.Region,
		UsePathStyle: true,
		Credentials:  creds,
		HTTPClient:   &http.Client{Transport: tr},
		// Retries are this package's (retry), so that 4xx, checksum and
		// size failures are never retried and every attempt is counted.
		Retryer:                    aws.NopRetryer{},
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	if f.transport != nil {
		f.transport.CloseIdleConnections()
	}
	f.client, f.transport, f.version = cl, tr, v
	f.opts.Metrics.ClientReloads.WithLabelValues("ok").Inc()
	return cl, nil
}
