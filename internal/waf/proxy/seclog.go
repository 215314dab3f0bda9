package proxy

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/vilaca/portal/internal/waf/cache"
)

// SecurityLogs opens the security log destinations of WAFGatewayBindingPolicies
// for a Router: Stderr, a File inside Dir (an os.Root, so no path leaves
// it), or a Syslog server over TCP. The matched-rule lines of the policy's
// routes go to every destination, as JSON, beside the proxy's own log.
type SecurityLogs struct {
	// Dir is the directory File destinations live in
	// (--security-log-dir); empty refuses File destinations.
	Dir string
	// Base is the proxy's own log handler, kept as one destination.
	Base slog.Handler

	mu    sync.Mutex
	files map[string]io.Writer
	syslg map[string]io.Writer
}

// Open returns a logger writing to Base and every destination of logs.
func (s *SecurityLogs) Open(logs []cache.SecurityLog) (*slog.Logger, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	handlers := []slog.Handler{s.Base}
	for _, l := range logs {
		var w io.Writer
		switch l.Type {
		case "Stderr":
			w = os.Stderr
		case "File":
			f, err := s.file(l.Path)
			if err != nil {
				return nil, fmt.Errorf("security log %s: %w", l.Name, err)
			}
			w = f
		case "Syslog":
			w = s.syslog(l.Server)
		default:
			return nil, fmt.Errorf("security log %s: unknown destination type %q", l.Name, l.Type)
		}
		handlers = append(handlers, slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}).WithAttrs([]slog.Attr{slog.String("securityLog", l.Name)}))
	}
	return slog.New(slog.NewMultiHandler(handlers...)), nil
}

func (s *SecurityLogs) file(rel string) (io.Writer, error) {
	if s.Dir == "" {
		return nil, fmt.Errorf("file destinations need --security-log-dir")
	}
	if w, ok := s.files[rel]; ok {
		return w, nil
	}
	root, err := os.OpenRoot(s.Dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if d := filepath.Dir(rel); d != "." {
		if err := root.MkdirAll(d, 0o750); err != nil {
			return nil, err
		}
	}
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, err
	}
	if s.files == nil {
		s.files = map[string]io.Writer{}
	}
	w := &lockedWriter{w: f}
	s.files[rel] = w
	return w, nil
}

func (s *SecurityLogs) syslog(server string) io.Writer {
	if w, ok := s.syslg[server]; ok {
		return w
	}
	if s.syslg == nil {
		s.syslg = map[string]io.Writer{}
	}
	w := &syslogWriter{addr: server}
	s.syslg[server] = w
	return w
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// syslogWriter sends each line as an RFC 5424 message over TCP
// (non-transparent framing), reconnecting after a failure. A line that
// cannot be sent is dropped: the WAF never waits on its log.
type syslogWriter struct {
	addr string
	mu   sync.Mutex
	conn net.Conn
	down time.Time
}

const syslogRetry = 5 * time.Second

func (s *syslogWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		if time.Since(s.down) < syslogRetry {
			return len(p), nil
		}
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err != nil {
			s.down = time.Now()
			return len(p), nil
		}
		s.conn = c
	}
	host, _ := os.Hostname()
	// <132>: facility local0, severity warning.
	msg := fmt.Sprintf("<132>1 %s %s portal-waf-proxy - - - %s", time.Now().UTC().Format(time.RFC3339Nano), host, p)
	_ = s.conn.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(s.conn, msg); err != nil {
		_ = s.conn.Close()
		s.conn, s.down = nil, time.Now()
	}
	return len(p), nil
}
