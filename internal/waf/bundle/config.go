package bundle

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// Keys read from the Secrets.
const (
	// KeyAccessKeyID and KeySecretAccessKey hold the S3 credentials.
	KeyAccessKeyID     = "accessKeyID"
	KeySecretAccessKey = "secretAccessKey"
	// KeySeaweedFSSecret is seed 001's PLM credentials key; with it, and
	// no accessKeyID, the access key id is "admin" as PLM sets it up.
	KeySeaweedFSSecret = "seaweedfs_admin_secret"
	// KeyCA holds the PEM CA bundle storage's certificate must chain to.
	KeyCA = "ca.crt"
)

// Config is how the fetcher reaches storage: credentials and TLS.
type Config struct {
	// AccessKeyID and SecretAccessKey sign requests; empty: anonymous.
	AccessKeyID, SecretAccessKey string
	// RootCAs verifies storage's certificate; nil: the system roots.
	RootCAs *x509.CertPool
	// Certificate, when set, is presented to storage (mutual TLS).
	Certificate *tls.Certificate
	// SkipVerify turns off the check of storage's certificate (development
	// only).
	SkipVerify bool
}

// TLS returns the client TLS configuration of c (TLS 1.2 at least).
func (c Config) TLS() *tls.Config {
	t := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.RootCAs, InsecureSkipVerify: c.SkipVerify} //nolint:gosec // development flag, documented
	if c.Certificate != nil {
		t.Certificates = []tls.Certificate{*c.Certificate}
	}
	return t
}

// ConfigSource gives the fetcher its current Config. Version changes
// whenever the Config may have: the fetcher then builds a new S3 client, so
// rotated credentials and certificates are used by the next request without
// a restart.
type ConfigSource interface {
	Config() (Config, error)
	Version() uint64
}

// StaticConfig is a ConfigSource that never changes.
type StaticConfig Config

func (s StaticConfig) Config() (Config, error) { return Config(s), nil }
func (StaticConfig) Version() uint64           { return 0 }

// SecretRefs name the Secrets a SecretSource reads; a zero ref is not used.
type SecretRefs struct {
	// Credentials holds accessKeyID and secretAccessKey.
	Credentials types.NamespacedName
	// CA holds ca.crt.
	CA types.NamespacedName
	// ClientCert holds tls.crt and tls.key (kubernetes.io/tls).
	ClientCert types.NamespacedName
}

// ParseSecretRef parses "name" (in defaultNamespace) or "namespace/name";
// "" is the zero ref.
func ParseSecretRef(s, defaultNamespace string) (types.NamespacedName, error) {
	if s == "" {
		return types.NamespacedName{}, nil
	}
	ns, name, ok := strings.Cut(s, "/")
	if !ok {
		ns, name = defaultNamespace, s
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("secret reference %q: use NAME or NAMESPACE/NAME", s)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// SecretSource is a ConfigSource that watches the credential, CA and
// client-certificate Secrets, each through an informer that lists and
// watches that one Secret (RBAC: get, list and watch on Secrets in their
// namespaces). Start it (it is a manager Runnable) before the first fetch.
type SecretSource struct {
	refs       SecretRefs
	skipVerify bool
	factories  []informers.SharedInformerFactory
	// listers and synced are fixed by NewSecretSource.
	listers map[types.NamespacedName]listerscorev1.SecretLister
	synced  []toolscache.InformerSynced

	version atomic.Uint64
}

// NewSecretSource returns a source reading refs through kc.
func NewSecretSource(kc kubernetes.Interface, refs SecretRefs, skipVerify bool) *SecretSource {
	s := &SecretSource{refs: refs, skipVerify: skipVerify, listers: map[types.NamespacedName]listerscorev1.SecretLister{}}
	bump := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.version.Add(1) },
		UpdateFunc: func(any, any) { s.version.Add(1) },
		DeleteFunc: func(any) { s.version.Add(1) },
	}
	for _, ref := range []types.NamespacedName{refs.Credentials, refs.CA, refs.ClientCert} {
		if ref.Name == "" || s.listers[ref] != nil {
			continue
		}
		f := informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithNamespace(ref.Namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ref.Name).String()
			}))
		inf := f.Core().V1().Secrets()
		// Adding a handler to an informer that has not started cannot fail.
		_, _ = inf.Informer().AddEventHandler(bump)
		s.listers[ref] = inf.Lister()
		s.synced = append(s.synced, inf.Informer().HasSynced)
		s.factories = append(s.factories, f)
	}
	return s
}

// NeedLeaderElection: every replica fetches.
func (s *SecretSource) NeedLeaderElection() bool { return false }

// Start runs the informers until ctx ends.
func (s *SecretSource) Start(ctx context.Context) error {
	for _, f := range s.factories {
		f.Start(ctx.Done())
	}
	<-ctx.Done()
	for _, f := range s.factories {
		f.Shutdown()
	}
	return nil
}

// Version counts changes seen on the Secrets.
func (s *SecretSource) Version() uint64 { return s.version.Load() }

// Config reads the Secrets as the informers last saw them.
func (s *SecretSource) Config() (Config, error) {
	if !slicesAll(s.synced) {
		return Config{}, errors.New("the bundle storage Secrets are not loaded yet")
	}
	c := Config{SkipVerify: s.skipVerify}
	if ref := s.refs.Credentials; ref.Name != "" {
		sec, err := s.get(ref, "credentials")
		if err != nil {
			return Config{}, err
		}
		c.AccessKeyID, c.SecretAccessKey = string(sec.Data[KeyAccessKeyID]), string(sec.Data[KeySecretAccessKey])
		if c.AccessKeyID == "" && len(sec.Data[KeySeaweedFSSecret]) > 0 {
			c.AccessKeyID, c.SecretAccessKey = "admin", string(sec.Data[KeySeaweedFSSecret])
		}
		if c.AccessKeyID == "" || c.SecretAccessKey == "" {
			return Config{}, fmt.Errorf("bundle storage credentials Secret %s: needs keys %s and %s", ref, KeyAccessKeyID, KeySecretAccessKey)
		}
	}
	if ref := s.refs.CA; ref.Name != "" {
		sec, err := s.get(ref, "CA")
		if err != nil {
			return Config{}, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(sec.Data[KeyCA]) {
			return Config{}, fmt.Errorf("bundle storage CA Secret %s: key %s holds no PEM certificate", ref, KeyCA)
		}
		c.RootCAs = pool
	}
	if ref := s.refs.ClientCert; ref.Name != "" {
		sec, err := s.get(ref, "client certificate")
		if err != nil {
			return Config{}, err
		}
		cert, err := tls.X509KeyPair(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
		if err != nil {
			return Config{}, fmt.Errorf("bundle storage client certificate Secret %s: keys %s and %s: %w", ref, corev1.TLSCertKey, corev1.TLSPrivateKeyKey, err)
		}
		c.Certificate = &cert
	}
	return c, nil
}

func (s *SecretSource) get(ref types.NamespacedName, what string) (*corev1.Secret, error) {
	sec, err := s.listers[ref].Secrets(ref.Namespace).Get(ref.Name)
	if err != nil {
		return nil, fmt.Errorf("bundle storage %s Secret %s: %w", what, ref, err)
	}
	return sec, nil
}

func slicesAll(fs []toolscache.InformerSynced) bool {
	for _, f := range fs {
		if !f() {
			return false
		}
	}
	return true
}
