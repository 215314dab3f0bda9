package bundle_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/vilaca/portal/internal/devcluster/devtest"
	"github.com/vilaca/portal/internal/waf/bundle"
	"github.com/vilaca/portal/internal/waf/bundle/s3test"
)

// secrets creates a namespace and returns a client and a writer of Secrets
// in it.
func secrets(t *testing.T, ns string) (kubernetes.Interface, func(name string, data map[string][]byte)) {
	t.Helper()
	kc, err := kubernetes.NewForConfig(cluster(t).Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return kc, func(name string, data map[string][]byte) {
		t.Helper()
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
		_, err := kc.CoreV1().Secrets(ns).Update(ctx(t), sec, metav1.UpdateOptions{})
		if err != nil {
			_, err = kc.CoreV1().Secrets(ns).Create(ctx(t), sec, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func startSource(t *testing.T, src *bundle.SecretSource) {
	t.Helper()
	c, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = src.Start(c)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// Rotating the CA Secret changes which storage certificate the next fetch
// trusts, without a new Fetcher.
func TestCARotationWithoutRestart(t *testing.T) {
	const ns = "bundle-ca-rotation"
	kc, put := secrets(t, ns)
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	ca1, ca2 := s3test.NewCA(t, "storage-ca-1"), s3test.NewCA(t, "storage-ca-2")
	crt, key := ca1.Server(t)
	front := s3test.StartNginx(t, s.Addr(), s3test.TLS{Cert: crt, Key: key})
	put("creds", map[string][]byte{bundle.KeyAccessKeyID: []byte(s3test.AccessKey), bundle.KeySecretAccessKey: []byte(s3test.SecretKey)})
	put("ca", map[string][]byte{bundle.KeyCA: ca1.PEM})
	src := bundle.NewSecretSource(kc, bundle.SecretRefs{
		Credentials: types.NamespacedName{Namespace: ns, Name: "creds"},
		CA:          types.NamespacedName{Namespace: ns, Name: "ca"},
	}, false)
	startSource(t, src)
	f, m := fetcher(t, bundle.Options{URL: front.URL(), Source: src, Attempts: 3})

	v1 := doc(t, 4001)
	s.Put(t, bucket, "v1.json", v1)
	devtest.Eventually(t, "a fetch over TLS trusting CA 1", func() bool {
		_, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/v1.json", sum(v1))
		return err == nil
	})

	// Storage moves to a certificate of CA 2: CA 1 no longer verifies it,
	// and that is not retried.
	crt2, key2 := ca2.Server(t)
	front.Reload(t, s3test.TLS{Cert: crt2, Key: key2})
	v2 := doc(t, 4002)
	s.Put(t, bucket, "v2.json", v2)
	before := requests(m, bundle.OutcomePermanent)
	res, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/v2.json", sum(v2))
	var fe *bundle.FetchError
	if !errors.As(err, &fe) || fe.Transient || res.State != bundle.StateStale {
		t.Fatalf("untrusted certificate: state %s error %v, want a permanent FetchError and the last good bundle", res.State, err)
	}
	if got := requests(m, bundle.OutcomePermanent) - before; got != 1 {
		t.Fatalf("%d requests for an untrusted certificate, want 1", got)
	}

	// Rotate the CA Secret: the same fetcher trusts CA 2.
	put("ca", map[string][]byte{bundle.KeyCA: ca2.PEM})
	devtest.Eventually(t, "a fetch trusting the rotated CA", func() bool {
		res, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/v2.json", sum(v2))
		return err == nil && res.State == bundle.StateFresh
	})
}

// Rotating the client-certificate Secret changes the certificate the next
// fetch presents to storage that requires one (nginx, ssl_verify_client on).
func TestClientCertificateRotationWithoutRestart(t *testing.T) {
	const ns = "bundle-mtls-rotation"
	kc, put := secrets(t, ns)
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	serverCA, client1, client2 := s3test.NewCA(t, "storage-ca"), s3test.NewCA(t, "client-ca-1"), s3test.NewCA(t, "client-ca-2")
	crt, key := serverCA.Server(t)
	front := s3test.StartNginx(t, s.Addr(), s3test.TLS{Cert: crt, Key: key, ClientCA: client1.PEM})
	put("creds", map[string][]byte{bundle.KeyAccessKeyID: []byte(s3test.AccessKey), bundle.KeySecretAccessKey: []byte(s3test.SecretKey)})
	put("ca", map[string][]byte{bundle.KeyCA: serverCA.PEM})
	c1, k1 := client1.Client(t, "portal")
	put("client", map[string][]byte{corev1.TLSCertKey: c1, corev1.TLSPrivateKeyKey: k1})
	src := bundle.NewSecretSource(kc, bundle.SecretRefs{
		Credentials: types.NamespacedName{Namespace: ns, Name: "creds"},
		CA:          types.NamespacedName{Namespace: ns, Name: "ca"},
		ClientCert:  types.NamespacedName{Namespace: ns, Name: "client"},
	}, false)
	startSource(t, src)
	f, _ := fetcher(t, bundle.Options{URL: front.URL(), Source: src, Attempts: 3})

	v1 := doc(t, 5001)
	s.Put(t, bucket, "v1.json", v1)
	devtest.Eventually(t, "a fetch with client certificate 1", func() bool {
		_, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/v1.json", sum(v1))
		return err == nil
	})

	// Storage now requires certificates of client CA 2: nginx refuses the
	// old one with 400, a client error, not retried.
	// (A new serving certificate too, so Reload can tell the new workers.)
	crt, key = serverCA.Server(t)
	front.Reload(t, s3test.TLS{Cert: crt, Key: key, ClientCA: client2.PEM})
	v2 := doc(t, 5002)
	s.Put(t, bucket, "v2.json", v2)
	res, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/v2.json", sum(v2))
	var fe *bundle.FetchError
	if !errors.As(err, &fe) || fe.Status != http.StatusBadRequest || fe.Attempts != 1 || res.State != bundle.StateStale {
		t.Fatalf("refused client certificate: state %s error %v, want HTTP 400 once and the last good bundle", res.State, err)
	}

	c2, k2 := client2.Client(t, "portal")
	put("client", map[string][]byte{corev1.TLSCertKey: c2, corev1.TLSPrivateKeyKey: k2})
	devtest.Eventually(t, "a fetch with the rotated client certificate", func() bool {
		res, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/v2.json", sum(v2))
		return err == nil && res.State == bundle.StateFresh
	})
}

// A Secret that is missing or malformed fails the fetch with a message that
// names the Secret and the key to fix, and nothing is retried against
// storage.
func TestBrokenSecretsSayWhatToFix(t *testing.T) {
	const ns = "bundle-broken-secrets"
	kc, put := secrets(t, ns)
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	v1 := doc(t, 8001)
	s.Put(t, bucket, "v1.json", v1)
	ca := s3test.NewCA(t, "ca")
	crt, _ := ca.Client(t, "portal")
	_, otherKey := ca.Client(t, "other")
	put("creds", map[string][]byte{"password": []byte("x")})
	put("ca", map[string][]byte{bundle.KeyCA: []byte("not a certificate")})
	put("client", map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: otherKey})
	for name, tc := range map[string]struct {
		refs bundle.SecretRefs
		want string
	}{
		"credentials without keys": {bundle.SecretRefs{Credentials: types.NamespacedName{Namespace: ns, Name: "creds"}}, "needs keys accessKeyID and secretAccessKey"},
		"CA without a certificate": {bundle.SecretRefs{CA: types.NamespacedName{Namespace: ns, Name: "ca"}}, "key ca.crt holds no PEM certificate"},
		"mismatched key":           {bundle.SecretRefs{ClientCert: types.NamespacedName{Namespace: ns, Name: "client"}}, "keys tls.crt and tls.key"},
		"missing Secret":           {bundle.SecretRefs{CA: types.NamespacedName{Namespace: ns, Name: "absent"}}, `"absent" not found`},
	} {
		t.Run(name, func(t *testing.T) {
			src := bundle.NewSecretSource(kc, tc.refs, false)
			startSource(t, src)
			f, m := fetcher(t, bundle.Options{URL: s.URL(), Source: src})
			var err error
			devtest.Eventually(t, "the Secret read", func() bool {
				_, err = f.Get(ctx(t), "ns/p", "s3://"+bucket+"/v1.json", sum(v1))
				return err != nil && !strings.Contains(err.Error(), "not loaded yet")
			})
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), ns+"/") || bundle.Reason(err) != bundle.ReasonFetchError {
				t.Fatalf("error %q, want it to name the Secret and say %q", err, tc.want)
			}
			if n := requests(m, bundle.OutcomeOK) + requests(m, bundle.OutcomeTransient) + requests(m, bundle.OutcomePermanent); n != 0 {
				t.Fatalf("%d requests with a broken Secret, want 0", n)
			}
		})
	}
}

// --bundle-storage-skip-verify accepts a certificate nothing vouches for;
// without it the fetch fails at once.
func TestSkipVerify(t *testing.T) {
	s := s3test.Start(t)
	s.CreateBucket(t, bucket)
	v1 := doc(t, 8101)
	s.Put(t, bucket, "v1.json", v1)
	crt, key := s3test.NewCA(t, "unknown").Server(t)
	front := s3test.StartNginx(t, s.Addr(), s3test.TLS{Cert: crt, Key: key})
	creds := rootCreds()
	f, _ := fetcher(t, bundle.Options{URL: front.URL(), Source: creds})
	if _, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/v1.json", sum(v1)); err == nil {
		t.Fatal("an unknown CA was trusted")
	}
	creds.SkipVerify = true
	f, _ = fetcher(t, bundle.Options{URL: front.URL(), Source: creds})
	if _, err := f.Get(ctx(t), "ns/p", "s3://"+bucket+"/v1.json", sum(v1)); err != nil {
		t.Fatal(err)
	}
}
