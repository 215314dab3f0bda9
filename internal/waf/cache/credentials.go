package cache

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
)

// maxCredentialFileBytes bounds a token or CA file read.
const maxCredentialFileBytes = 1 << 20

// TokenFile returns a Client.Token that reads the token from path on every
// call: a projected ServiceAccount token is rewritten by the kubelet before
// it expires, and the next request sends the new one.
func TokenFile(path string) func() (string, error) {
	return func() (string, error) {
		data, err := readSmall(path)
		if err != nil {
			return "", fmt.Errorf("token file: %w", err)
		}
		token := strings.TrimSpace(string(data))
		if token == "" {
			return "", fmt.Errorf("token file %s is empty", path)
		}
		return token, nil
	}
}

// NewCATransport returns a RoundTripper that verifies the server against
// the CA certificates (PEM) in caFile and nothing else. The file is read
// again before each request and a changed bundle takes effect at once, so a
// CA rotation that rewrites the file (a ConfigMap or Secret volume) needs no
// restart. A file that cannot be read or holds no certificate fails the
// request; the system roots are never used instead.
func NewCATransport(caFile string) (http.RoundTripper, error) {
	t := &caTransport{file: caFile}
	if _, err := t.current(); err != nil {
		return nil, err
	}
	return t, nil
}

type caTransport struct {
	file string

	mu    sync.Mutex
	pem   []byte
	inner *http.Transport
}

func (t *caTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	inner, err := t.current()
	if err != nil {
		return nil, err
	}
	return inner.RoundTrip(r)
}

// current returns the transport for the CA file as it is now.
func (t *caTransport) current() (*http.Transport, error) {
	data, err := readSmall(t.file)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inner != nil && bytes.Equal(data, t.pem) {
		return t.inner, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", t.file)
	}
	next := http.DefaultTransport.(*http.Transport).Clone()
	next.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if t.inner != nil {
		t.inner.CloseIdleConnections()
	}
	t.pem, t.inner = data, next
	return next, nil
}

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxCredentialFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxCredentialFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxCredentialFileBytes)
	}
	return data, nil
}
