package admission

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ClientCARecheck is how often, at most, a handshake re-reads the client CA
// file: a rotated CA is in force within this long, and a flood of
// handshakes costs at most one file read per period.
const ClientCARecheck = 2 * time.Second

var errNoPEM = errors.New("admission: the client CA holds no PEM certificate")

// ClientAuthFile is ClientAuth with the CA read from path and re-read when
// its content changes (a mounted ConfigMap or Secret updated in place), so
// a rotated CA needs no restart. A file that cannot be read or holds no
// certificate at start is an error; later, the last good CA stays in force
// and the problem is logged.
func ClientAuthFile(path string, allowedNames []string, log *slog.Logger) (func(*tls.Config), error) {
	if log == nil {
		log = slog.Default()
	}
	ca := &fileCA{path: path, log: log.With("file", path)}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool, err := parseCA(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ca.pool.Store(pool)
	ca.last = data
	ca.next = time.Now().Add(ClientCARecheck)
	static := clientAuth(pool, allowedNames)
	return func(c *tls.Config) {
		static(c)
		base := c
		var cached atomic.Pointer[poolConfig]
		// Runs on every handshake, after all TLS options have been
		// applied: the connection gets base with the current pool.
		c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			pool := ca.current()
			if pc := cached.Load(); pc != nil && pc.pool == pool {
				return pc.conf, nil
			}
			conf := base.Clone()
			conf.ClientCAs = pool
			conf.GetConfigForClient = nil
			cached.Store(&poolConfig{pool: pool, conf: conf})
			return conf, nil
		}
	}, nil
}

type poolConfig struct {
	pool *x509.CertPool
	conf *tls.Config
}

// fileCA is a client CA pool read from a file.
type fileCA struct {
	path string
	log  *slog.Logger
	pool atomic.Pointer[x509.CertPool]

	mu      sync.Mutex // held by the one handshake re-reading the file
	next    time.Time  // when the file may be read again
	last    []byte     // the content last read, good or bad
	lastErr string     // the read error last logged
}

// current returns the pool in force, re-reading the file first when
// ClientCARecheck has passed. Handshakes never wait on the re-read: the one
// that takes the lock reads, the others use the pool as it is.
func (f *fileCA) current() *x509.CertPool {
	if f.mu.TryLock() {
		if now := time.Now(); !now.Before(f.next) {
			f.next = now.Add(ClientCARecheck)
			f.reload()
		}
		f.mu.Unlock()
	}
	return f.pool.Load()
}

func (f *fileCA) reload() {
	data, err := os.ReadFile(f.path)
	if err != nil {
		if err.Error() != f.lastErr {
			f.lastErr = err.Error()
			f.log.Error("cannot re-read the webhook client CA; the last good one stays in force", "error", err)
		}
		return
	}
	f.lastErr = ""
	if bytes.Equal(data, f.last) {
		return
	}
	f.last = data
	pool, err := parseCA(data)
	if err != nil {
		f.log.Error("the webhook client CA file changed to something unusable; the last good one stays in force", "error", err)
		return
	}
	f.pool.Store(pool)
	f.log.Info("webhook client CA reloaded")
}

func parseCA(data []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errNoPEM
	}
	return pool, nil
}
