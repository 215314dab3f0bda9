// Package s3test runs real S3-compatible storage for tests: versitygw
// (bin/versitygw, which `make tools` builds from the hack/tools/versitygw
// module and which Start builds the same way when it is missing) on
// 127.0.0.1, and Debian's nginx in front of it for TLS and mutual TLS
// (`make bundle-tools` installs it), with certificates made in the test.
package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/vilaca/portal/internal/freeport"
	"github.com/vilaca/portal/internal/testbin"
)

// Root credentials of the test storage.
const (
	AccessKey = "portal-test"
	SecretKey = "portal-test-secret"
)

// versitygw is bin/versitygw, which Start builds when it is missing.
var versitygw = testbin.New("versitygw", "versitygw", "github.com/versity/versitygw/cmd/versitygw")

// process is a child process the test started, with its exit watched.
type process struct {
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

func (p *process) start(cmd *exec.Cmd, ready func() bool, what string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if os.Getenv("PORTAL_TEST_LOG") != "" {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", what, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
	err := wait.PollUntilContextTimeout(context.Background(), 25*time.Millisecond, 30*time.Second, true,
		func(context.Context) (bool, error) {
			select {
			case <-exited:
				return false, fmt.Errorf("%s exited at start", what)
			default:
			}
			return ready(), nil
		})
	if err != nil {
		_ = cmd.Process.Kill()
		<-exited
		p.cmd = nil
		return fmt.Errorf("%s not ready: %w", what, err)
	}
	return nil
}

// stop ends the process (SIGTERM, SIGKILL after 10s) and waits for it.
func (p *process) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	p.cmd = nil
}

// Storage is a versitygw process serving plain HTTP on 127.0.0.1 from a
// directory; it keeps its port and data across Stop and Start.
type Storage struct {
	process
	bin, dir string
	port     int
}

// Start starts versitygw on a free port, stopped when t ends.
func Start(t testing.TB) *Storage {
	t.Helper()
	bin, err := versitygw.Path()
	if err != nil {
		t.Fatal(err)
	}
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	s := &Storage{bin: bin, dir: t.TempDir(), port: port}
	for _, d := range []string{"data", "meta"} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(s.Stop)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	return s
}

// Addr is host:port.
func (s *Storage) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

// URL is the plain HTTP endpoint.
func (s *Storage) URL() string { return "http://" + s.Addr() }

// Start (re)starts versitygw and waits until it answers.
func (s *Storage) Start() error {
	cmd := exec.Command(s.bin, "--access", AccessKey, "--secret", SecretKey, "--port", s.Addr(), "--quiet",
		"posix", "--sidecar", filepath.Join(s.dir, "meta"), filepath.Join(s.dir, "data"))
	return s.start(cmd, func() bool {
		resp, err := http.Get(s.URL() + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}, "versitygw")
}

// Stop stops versitygw: storage is down until Start.
func (s *Storage) Stop() { s.stop() }

// Client is an S3 client with the root credentials, straight to versitygw.
func (s *Storage) Client() *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(s.URL()), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
	})
}

// CreateBucket creates a bucket.
func (s *Storage) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	if _, err := s.Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket %s: %v", bucket, err)
	}
}

// Put stores an object.
func (s *Storage) Put(t testing.TB, bucket, key string, data []byte) {
	t.Helper()
	_, err := s.Client().PutObject(context.Background(), &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		t.Fatalf("put s3://%s/%s: %v", bucket, key, err)
	}
}

// Object reads an object back.
func (s *Storage) Object(ctx context.Context, bucket, key string) ([]byte, error) {
	out, err := s.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return nil, err
	}
	defer out.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(out.Body)
	return b.Bytes(), err
}

// errNoNginx says how to get nginx.
var errNoNginx = errors.New("nginx is not installed: run `make bundle-tools` (Debian's nginx package)")
