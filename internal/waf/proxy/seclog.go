package proxy

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vilaca/portal/internal/waf/cache"
)

// SecurityLogs opens the security log destinations of WAFGatewayBindingPolicies
// for a Router: Stderr, a File inside Dir (an os.Root, so no path leaves
// it), or a Syslog server over TCP or UDP. The matched-rule lines of the
// policy's routes go to every destination, as JSON, beside the proxy's own
// log; the proxy's other lines stay in its own log.
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
			sw, err := s.syslog(l.Server, l.Protocol)
			if err != nil {
				return nil, fmt.Errorf("security log %s: %w", l.Name, err)
			}
			w = sw
		default:
			return nil, fmt.Errorf("security log %s: unknown destination type %q", l.Name, l.Type)
		}
		h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}).WithAttrs([]slog.Attr{slog.String("securityLog", l.Name)})
		handlers = append(handlers, onlyMatches{h})
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

func (s *SecurityLogs) syslog(server, protocol string) (io.Writer, error) {
	network := "tcp"
	switch protocol {
	case "", "TCP":
	case "UDP":
		network = "udp"
	default:
		return nil, fmt.Errorf("syslog protocol %q: use TCP or UDP", protocol)
	}
	key := network + "://" + server
	if w, ok := s.syslg[key]; ok {
		return w, nil
	}
	if len(s.syslg) >= maxSyslogServers {
		return nil, fmt.Errorf("more than %d syslog servers", maxSyslogServers)
	}
	if s.syslg == nil {
		s.syslg = map[string]io.Writer{}
	}
	w := newSyslogWriter(network, server)
	s.syslg[key] = w
	return w, nil
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

// MatchMessage is the message of the log line of a matched rule: the only
// line security log destinations get (the proxy's own lines, upstream
// errors and the like, stay in its log).
const MatchMessage = "waf rule matched"

// onlyMatches passes only matched-rule records to h.
type onlyMatches struct{ slog.Handler }

func (o onlyMatches) Handle(ctx context.Context, r slog.Record) error {
	if r.Message != MatchMessage {
		return nil
	}
	return o.Handler.Handle(ctx, r)
}

func (o onlyMatches) WithAttrs(as []slog.Attr) slog.Handler {
	return onlyMatches{o.Handler.WithAttrs(as)}
}
func (o onlyMatches) WithGroup(g string) slog.Handler { return onlyMatches{o.Handler.WithGroup(g)} }

// Bounds of syslog destinations.
const (
	// maxSyslogServers bounds the destinations one proxy opens: each has
	// a connection and a sender.
	maxSyslogServers = 32
	// syslogQueue is how many messages wait for a sender; more are
	// dropped, so the WAF never waits on its log.
	syslogQueue = 1024
	// maxSyslogMessage is the most bytes of one message (rsyslog's
	// default $MaxMessageSize); a longer line is cut.
	maxSyslogMessage = 8 << 10
	syslogRetry      = 5 * time.Second
	syslogTimeout    = time.Second
)

// syslogWriter sends each line as one RFC 5424 message: over TCP with
// RFC 6587 octet-counted framing, over UDP one message per datagram
// (RFC 5426), both of which rsyslog, syslog-ng and Fluent Bit accept.
// Write only queues: a sender goroutine dials, writes and reconnects after
// a failure, and a line that cannot be queued is dropped.
type syslogWriter struct {
	network, addr, host string
	queue               chan []byte
}

func newSyslogWriter(network, addr string) *syslogWriter {
	host, _ := os.Hostname()
	w := &syslogWriter{network: network, addr: addr, host: syslogHostname(host), queue: make(chan []byte, syslogQueue)}
	go w.send()
	return w
}

// syslogHostname is h as RFC 5424 HOSTNAME allows it: 1-255 printable
// US-ASCII characters, "-" when unknown.
func syslogHostname(h string) string {
	h = strings.Map(func(r rune) rune {
		if r < 33 || r > 126 {
			return -1
		}
		return r
	}, h)
	if len(h) > 255 {
		h = h[:255]
	}
	return cmp.Or(h, "-")
}

func (s *syslogWriter) Write(p []byte) (int, error) {
	select {
	case s.queue <- s.format(time.Now(), p):
	default:
	}
	return len(p), nil
}

// format makes line one RFC 5424 message: PRI 132 (local0, warning),
// version 1, a timestamp with microseconds (the most TIME-SECFRAC
// allows), HOSTNAME, APP-NAME portal-waf-proxy, no PROCID, MSGID or
// structured data, then the line.
func (s *syslogWriter) format(now time.Time, line []byte) []byte {
	line = bytes.TrimRight(line, "\n")
	msg := fmt.Appendf(nil, "<132>1 %s %s portal-waf-proxy - - - ", now.UTC().Format("2006-01-02T15:04:05.000000Z07:00"), s.host)
	msg = append(msg, line...)
	if len(msg) > maxSyslogMessage {
		msg = msg[:maxSyslogMessage]
	}
	return msg
}

func (s *syslogWriter) send() {
	var conn net.Conn
	for msg := range s.queue {
		if conn == nil {
			c, err := net.DialTimeout(s.network, s.addr, syslogTimeout)
			if err != nil {
				// Drop what waits while the server is away, then try
				// again.
				time.Sleep(syslogRetry)
				s.drain()
				continue
			}
			conn = c
		}
		frame := msg
		if s.network == "tcp" {
			frame = append(strconv.AppendInt(nil, int64(len(msg)), 10), ' ')
			frame = append(frame, msg...)
		}
		_ = conn.SetWriteDeadline(time.Now().Add(syslogTimeout))
		if _, err := conn.Write(frame); err != nil {
			_ = conn.Close()
			conn = nil
		}
	}
}

func (s *syslogWriter) drain() {
	for {
		select {
		case <-s.queue:
		default:
			return
		}
	}
}
