// Package amtest runs a real Alertmanager on 127.0.0.1 for tests: the binary
// bin/alertmanager, which `make tools` builds from the hack/tools/alertmanager
// module, and which Start builds the same way when it is missing.
package amtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/testbin"
)

// Server is a real Alertmanager process on 127.0.0.1, built from the
// hack/tools/alertmanager module into bin/alertmanager (`make tools`, or the
// first test run when the binary is missing). It keeps its port across
// Stop and Start.
type Server struct {
	bin, dir string
	port     int
	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
}

// alertmanager is bin/alertmanager, which New builds when it is missing.
var alertmanager = testbin.New("alertmanager", "alertmanager", "github.com/prometheus/alertmanager/cmd/alertmanager")

// Start starts an Alertmanager on a free port, stopped when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	am, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(am.Stop)
	return am
}

// New starts an Alertmanager on a free port keeping its data in dir; the
// caller stops it.
func New(dir string) (*Server, error) {
	bin, err := alertmanager.Path()
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cfg := "route:\n  receiver: blackhole\n  group_wait: 1s\n  group_interval: 1s\nreceivers:\n  - name: blackhole\n"
	if err := os.WriteFile(filepath.Join(dir, "alertmanager.yml"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	am := &Server{bin: bin, dir: dir, port: port}
	return am, am.Start()
}

// URL is the base URL the sink is given.
func (am *Server) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", am.port) }

// Start (re)starts the process on its port and waits until it is ready.
func (am *Server) Start() error {
	am.mu.Lock()
	defer am.mu.Unlock()
	cmd := exec.Command(am.bin,
		"--config.file="+filepath.Join(am.dir, "alertmanager.yml"),
		"--storage.path="+filepath.Join(am.dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", am.port),
		"--cluster.listen-address=",
		"--log.level=warn",
	)
	if os.Getenv("PORTAL_TEST_LOG") != "" {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	am.cmd, am.exited = cmd, exited
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) {
			select {
			case <-exited:
				return false, errors.New("alertmanager exited at start")
			default:
			}
			resp, err := http.Get(am.URL() + "/-/ready")
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
	if err != nil {
		_ = cmd.Process.Kill()
		<-exited
		am.cmd = nil
		return fmt.Errorf("alertmanager on port %d not ready: %w", am.port, err)
	}
	return nil
}

// Stop stops the process and waits for it.
func (am *Server) Stop() {
	am.mu.Lock()
	defer am.mu.Unlock()
	if am.cmd == nil {
		return
	}
	_ = am.cmd.Process.Signal(os.Interrupt)
	select {
	case <-am.exited:
	case <-time.After(10 * time.Second):
		_ = am.cmd.Process.Kill()
		<-am.exited
	}
	am.cmd = nil
}

// Alert is the part of Alertmanager's GET /api/v2/alerts answer tests read.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
	Status      struct {
		State string `json:"state"`
	} `json:"status"`
}

// Alerts returns the active alerts of a namespace ("" for all).
func (am *Server) Alerts(namespace string) ([]Alert, error) {
	q := url.Values{}
	if namespace != "" {
		q.Set("filter", fmt.Sprintf("namespace=%q", namespace))
	}
	resp, err := http.Get(am.URL() + "/api/v2/alerts?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET alerts: %s", resp.Status)
	}
	var out []Alert
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

// AlertKeys counts the active alerts of a namespace by "rule/name/container".
func (am *Server) AlertKeys(namespace string) (map[string]int, error) {
	as, err := am.Alerts(namespace)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, a := range as {
		out[a.Labels["rule"]+"/"+a.Labels["name"]+"/"+a.Labels["container"]]++
	}
	return out, nil
}
