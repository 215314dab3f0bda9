package runtime

import (
	"context"
	"crypto/subtle"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultAuditNames are the client identities /audit accepts by default:
// the client certificate the documented webhook kubeconfig uses (kubeadm's
// apiserver-kubelet-client.crt). One client CA usually signs much more than
// the caller meant: a cluster CA signs every kubelet's client certificate,
// so a node could post forged audit events if the CA alone decided.
func DefaultAuditNames() []string { return []string{"kube-apiserver-kubelet-client"} }

// DefaultFalcoNames are the client identities /falco accepts by default:
// the names Falco's and Falcosidekick's client certificates are issued to.
func DefaultFalcoNames() []string { return []string{"falco", "falcosidekick"} }

// Bounds of client identities and chains.
const (
	MaxAllowedNames     = 64
	maxAllowedNameBytes = 253
	// maxPeerIntermediates bounds the chain a caller presents: the API
	// server's and Falco's client certificates are signed by the CA
	// itself, or through one intermediate. Each intermediate a caller adds
	// is signatures the server checks for it.
	maxPeerIntermediates = 1
)

// Reasons a caller is refused (portal_runtime_clients_refused_total).
const (
	RefuseCredentials = "no_credentials"
	RefuseIdentity    = "identity"
)

// CheckAllowedNames reports whether names is a usable list of client
// identities.
func CheckAllowedNames(names []string) error {
	if len(names) > MaxAllowedNames {
		return fmt.Errorf("%d names: at most %d", len(names), MaxAllowedNames)
	}
	for _, n := range names {
		if n == "" || len(n) > maxAllowedNameBytes {
			return fmt.Errorf("name %q: 1 to %d characters", n, maxAllowedNameBytes)
		}
	}
	return nil
}

// clientCA is the client CA bundle, read again when its file changes
// (a rotated CA, a ConfigMap update), so rotating it needs no restart. A
// change that does not parse keeps the last good bundle.
type clientCA struct {
	path string
	log  *slog.Logger
	pool atomic.Pointer[x509.CertPool]

	mu sync.Mutex
	// seen is the stamp of the file last read, good or not, so a bad file
	// is read once, not per request.
	seen fileStamp
}

type fileStamp struct {
	ino  uint64
	size int64
	mod  time.Time
}

func stampOf(fi os.FileInfo) fileStamp {
	return fileStamp{ino: inode(fi), size: fi.Size(), mod: fi.ModTime()}
}

func loadClientCA(path string, log *slog.Logger) (*clientCA, error) {
	c := &clientCA{path: path, log: log}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("runtime client CA: %w", err)
	}
	pool, err := readPool(path)
	if err != nil {
		return nil, err
	}
	c.seen = stampOf(fi)
	c.pool.Store(pool)
	return c, nil
}

func readPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("runtime client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("runtime client CA %s: no PEM certificate", path)
	}
	return pool, nil
}

// current returns the bundle, first reading the file again if it changed.
// It is called only for a request presenting a certificate, after its TLS
// handshake: a stat costs a fraction of that.
func (c *clientCA) current() *x509.CertPool {
	c.mu.Lock()
	defer c.mu.Unlock()
	fi, err := os.Stat(c.path)
	if err != nil {
		return c.pool.Load()
	}
	if st := stampOf(fi); st != c.seen {
		c.seen = st
		pool, err := readPool(c.path)
		if err != nil {
			c.log.Warn("runtime client CA changed but does not parse: keeping the previous one", "path", c.path, "error", err)
		} else {
			c.pool.Store(pool)
			c.log.Info("runtime client CA reloaded", "path", c.path)
		}
	}
	return c.pool.Load()
}

// peerNames returns the identities of the verified client certificate of r
// (its subject CN, DNS and URI SANs), or ok false when r presents none the
// client CA signed for client authentication.
func peerNames(r *http.Request, pool *x509.CertPool) (names []string, ok bool) {
	if pool == nil || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 ||
		len(r.TLS.PeerCertificates) > 1+maxPeerIntermediates {
		return nil, false
	}
	leaf := r.TLS.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, false
	}
	names = append(names, leaf.Subject.CommonName)
	names = append(names, leaf.DNSNames...)
	for _, u := range leaf.URIs {
		names = append(names, u.String())
	}
	return names, true
}

// connAuth is the verification of one connection's client certificate,
// done by its first request and kept for the others: a caller keeping one
// connection open cannot make every request verify a chain again. It is
// done again when the client CA changes.
type connAuth struct {
	mu    sync.Mutex
	pool  *x509.CertPool
	names []string
	ok    bool
}

type connAuthKey struct{}

// withConnAuth is the endpoint's http.Server.ConnContext.
func withConnAuth(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connAuthKey{}, &connAuth{})
}

// verifiedNames verifies r's client certificate against pool once per
// connection and pool (per request for a handler served without
// withConnAuth).
func verifiedNames(r *http.Request, pool *x509.CertPool) ([]string, bool) {
	ca, _ := r.Context().Value(connAuthKey{}).(*connAuth)
	if ca == nil || pool == nil {
		return peerNames(r, pool)
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if ca.pool != pool {
		ca.pool = pool
		ca.names, ca.ok = peerNames(r, pool)
	}
	return ca.names, ca.ok
}

// authorize decides whether r may post to p: 0 when it may, else the HTTP
// status it is refused with. A verified certificate bearing one of the
// path's names passes, and so does the path's bearer token (compared in
// constant time); a verified certificate of another identity without the
// token is forbidden, anything else unauthorized.
func (s *Server) authorize(r *http.Request, p *path) (int, []string) {
	var pool *x509.CertPool
	if s.ca != nil && r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		pool = s.ca.current()
	}
	names, verified := verifiedNames(r, pool)
	if verified {
		for _, n := range names {
			if p.names[n] {
				return 0, nil
			}
		}
	}
	if p.token != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(got), []byte(p.token)) == 1 {
			return 0, nil
		}
	}
	if verified {
		return http.StatusForbidden, names
	}
	return http.StatusUnauthorized, nil
}
