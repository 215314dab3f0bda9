package s3test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/freeport"
)

// TLS is what nginx serves: its certificate, and, when ClientCA is set, the
// CA client certificates must chain to (ssl_verify_client on).
type TLS struct {
	Cert, Key []byte
	ClientCA  []byte
}

// Nginx is Debian's nginx terminating TLS (and mutual TLS) in front of a
// Storage: versitygw has no client-certificate checks of its own.
type Nginx struct {
	process
	dir, upstream string
	port          int
}

// StartNginx starts nginx on a free port proxying to upstream (host:port),
// stopped when t ends.
func StartNginx(t testing.TB, upstream string, cfg TLS) *Nginx {
	t.Helper()
	if _, err := exec.LookPath("nginx"); err != nil {
		if _, err := os.Stat("/usr/sbin/nginx"); err != nil {
			t.Fatal(errNoNginx)
		}
	}
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	n := &Nginx{dir: t.TempDir(), upstream: upstream, port: port}
	for _, d := range []string{"logs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.write(cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	bin, err := exec.LookPath("nginx")
	if err != nil {
		bin = "/usr/sbin/nginx"
	}
	cmd := exec.Command(bin, "-p", n.dir, "-c", filepath.Join(n.dir, "nginx.conf"), "-e", filepath.Join(n.dir, "logs", "error.log"))
	ready := func() bool {
		c, err := tls.Dial("tcp", n.addr(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // readiness probe only
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	if err := n.start(cmd, ready, "nginx"); err != nil {
		log, _ := os.ReadFile(filepath.Join(n.dir, "logs", "error.log"))
		t.Fatalf("%v\n%s", err, log)
	}
	return n
}

func (n *Nginx) addr() string { return fmt.Sprintf("127.0.0.1:%d", n.port) }

// URL is the HTTPS endpoint.
func (n *Nginx) URL() string { return "https://" + n.addr() }

// write writes the certificates and the configuration.
func (n *Nginx) write(cfg TLS) error {
	files := map[string][]byte{"server.crt": cfg.Cert, "server.key": cfg.Key}
	verify := ""
	if cfg.ClientCA != nil {
		files["client-ca.crt"] = cfg.ClientCA
		verify = "ssl_client_certificate " + filepath.Join(n.dir, "client-ca.crt") + ";\n    ssl_verify_client on;\n    ssl_verify_depth 2;"
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(n.dir, name), data, 0o600); err != nil {
			return err
		}
	}
	user := ""
	if os.Geteuid() == 0 {
		// Workers read nothing from the test's 0700 directories as nobody.
		user = "user root;"
	}
	tmp := filepath.Join(n.dir, "tmp")
	conf := fmt.Sprintf(`%s
daemon off;
master_process on;
worker_processes 1;
pid %[2]s/nginx.pid;
events { worker_connections 256; }
http {
  access_log off;
  # Every request handshakes anew, so a rotation is seen by the next one.
  keepalive_timeout 0;
  client_body_temp_path %[3]s/body;
  proxy_temp_path %[3]s/proxy;
  fastcgi_temp_path %[3]s/fastcgi;
  uwsgi_temp_path %[3]s/uwsgi;
  scgi_temp_path %[3]s/scgi;
  server {
    listen 127.0.0.1:%[4]d ssl;
    ssl_certificate %[2]s/server.crt;
    ssl_certificate_key %[2]s/server.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    %[5]s
    client_max_body_size 0;
    location / {
      proxy_pass http://%[6]s;
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_buffering off;
      proxy_request_buffering off;
    }
  }
}
`, user, n.dir, tmp, n.port, verify, n.upstream)
	return os.WriteFile(filepath.Join(n.dir, "nginx.conf"), []byte(conf), 0o600)
}

// Reload serves cfg: new certificate files and a SIGHUP, after which nginx
// starts new workers with them. It returns once a new TLS handshake sees
// the new server certificate.
func (n *Nginx) Reload(t testing.TB, cfg TLS) {
	t.Helper()
	if err := n.write(cfg); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	err := n.cmd.Process.Signal(syscall.SIGHUP)
	n.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	want, err := tls.X509KeyPair(cfg.Cert, cfg.Key)
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 25*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		c, err := tls.Dial("tcp", n.addr(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // compares the served certificate only
		if err != nil {
			return false, nil
		}
		defer c.Close()
		// The old worker accepts connections until it has exited: wait
		// for it too, so every later connection gets the new config.
		return bytes.Equal(c.ConnectionState().PeerCertificates[0].Raw, want.Certificate[0]) && n.workers() == 1, nil
	})
	if err != nil {
		t.Fatalf("nginx did not pick up the new certificate: %v", err)
	}
}

// workers counts the master's child processes.
func (n *Nginx) workers() int {
	n.mu.Lock()
	pid := n.cmd.Process.Pid
	n.mu.Unlock()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return -1
	}
	return len(strings.Fields(string(data)))
}
