package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vilaca/portal/internal/waf/cache"
)

// syslogReceiver collects what a syslog server receives, framed as
// rsyslog frames it: each UDP datagram is a message; on TCP a frame that
// starts with a digit is octet-counted (RFC 6587 3.4.1), any other ends at
// a line feed (3.4.2).
type syslogReceiver struct {
	addr string
	mu   sync.Mutex
	msgs []string
}

func (r *syslogReceiver) add(m string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
}

func (r *syslogReceiver) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

func startUDPSyslog(t *testing.T) *syslogReceiver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	r := &syslogReceiver{addr: pc.LocalAddr().String()}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			r.add(string(buf[:n]))
		}
	}()
	return r
}

func startTCPSyslog(t *testing.T) *syslogReceiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &syslogReceiver{addr: l.Addr().String()}
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			conns = append(conns, c)
			r.mu.Unlock()
			go r.readFrames(c)
		}
	}()
	return r
}

func (r *syslogReceiver) readFrames(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		first, err := br.Peek(1)
		if err != nil {
			return
		}
		if first[0] < '0' || first[0] > '9' {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			r.add(strings.TrimSuffix(line, "\n"))
			continue
		}
		n, err := br.ReadString(' ')
		if err != nil {
			return
		}
		size, err := strconv.Atoi(strings.TrimSuffix(n, " "))
		if err != nil || size <= 0 || size > 64<<10 {
			r.add("bad octet count " + strconv.Quote(n))
			return
		}
		msg := make([]byte, size)
		if _, err := io.ReadFull(br, msg); err != nil {
			return
		}
		r.add(string(msg))
	}
}

// RFC 5424 section 6: HEADER SP STRUCTURED-DATA [SP MSG], with the field
// lengths it allows.
var (
	rfc5424   = regexp.MustCompile(`(?s)^<([0-9]{1,3})>1 (\S+) ([!-~]{1,255}) ([!-~]{1,48}) ([!-~]{1,128}) ([!-~]{1,32}) (-|\[.+?\]) (.*)$`)
	timestamp = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})$`)
)

// parseSyslog checks m is a well-formed RFC 5424 message and returns its
// PRI, APP-NAME and MSG.
func parseSyslog(m string) (pri int, app, msg string, err error) {
	f := rfc5424.FindStringSubmatch(m)
	if f == nil {
		return 0, "", "", fmt.Errorf("not an RFC 5424 message: %q", m)
	}
	if !timestamp.MatchString(f[2]) {
		return 0, "", "", fmt.Errorf("TIMESTAMP %q is not RFC 5424's (RFC 3339, at most 6 fractional digits)", f[2])
	}
	if _, err := time.Parse(time.RFC3339Nano, f[2]); err != nil {
		return 0, "", "", fmt.Errorf("TIMESTAMP %q: %w", f[2], err)
	}
	pri, _ = strconv.Atoi(f[1])
	if pri > 191 {
		return 0, "", "", fmt.Errorf("PRI %d", pri)
	}
	return pri, f[4], f[8], nil
}

// A Syslog security log, over UDP and over TCP, to real listeners,
// through a waf-proxy router running a blocking rule: each attack is one
// well-formed RFC 5424 message (local0.warning, app portal-waf-proxy)
// whose text is the JSON line of the matched rule, with its id; the
// proxy's other lines (the request blocked) do not go there, and a
// request no rule matches sends nothing.
func TestSecurityLogSyslog(t *testing.T) {
	udp, tcp := startUDPSyslog(t), startTCPSyslog(t)
	h := newRouterHarness(t)
	uuid := h.cache.put("shop", "base", word("attack", 4242), nil)
	tbl := &cache.Table{Gateway: "shop/gw", Default: 0,
		Policies: []cache.TablePolicy{{Policy: "shop/p", RuleSet: ruleSetRef("shop", "base", uuid), SecurityLogs: []cache.SecurityLog{
			{Name: "siem-udp", Type: "Syslog", Server: udp.addr, Protocol: "UDP"},
			{Name: "siem-tcp", Type: "Syslog", Server: tcp.addr, Protocol: "TCP"},
		}}},
		Rows: []cache.TableRow{row("HTTPRoute/shop/web", "", prefix("/"), 0)},
	}
	if err := h.publish(t, tbl); err != nil {
		t.Fatal(err)
	}
	if got := h.do(t, http.MethodGet, "/?q=fine"); got != http.StatusOK {
		t.Fatalf("benign request: %d", got)
	}
	for i := range 2 {
		if got := h.do(t, http.MethodGet, "/?q=attack"); got != http.StatusForbidden {
			t.Fatalf("attack %d: %d, want 403", i, got)
		}
	}
	for _, r := range []struct {
		name string
		rcv  *syslogReceiver
	}{{"siem-udp", udp}, {"siem-tcp", tcp}} {
		eventually(t, r.name+" to receive two messages", func() bool { return len(r.rcv.messages()) >= 2 })
		msgs := r.rcv.messages()
		if len(msgs) != 2 {
			t.Errorf("%s: %d messages for two attacks, want one each: %q", r.name, len(msgs), msgs)
		}
		for _, m := range msgs {
			pri, app, text, err := parseSyslog(m)
			if err != nil {
				t.Errorf("%s: %v", r.name, err)
				continue
			}
			if pri != 16*8+4 || app != "portal-waf-proxy" {
				t.Errorf("%s: PRI %d app %q, want 132 (local0.warning) portal-waf-proxy", r.name, pri, app)
			}
			var line struct {
				Msg         string `json:"msg"`
				SecurityLog string `json:"securityLog"`
				Policy      string `json:"policy"`
				Rule        struct {
					ID int `json:"id"`
				} `json:"rule"`
			}
			if err := json.Unmarshal([]byte(text), &line); err != nil {
				t.Errorf("%s: MSG is not the JSON line: %q: %v", r.name, text, err)
				continue
			}
			if line.Msg != MatchMessage || line.Rule.ID != 4242 || line.SecurityLog != r.name || line.Policy != "shop/p" {
				t.Errorf("%s: %+v, want the match of rule 4242 by policy shop/p", r.name, line)
			}
		}
	}
}

// A destination the proxy cannot use is refused with what to fix.
func TestSecurityLogSyslogRefusals(t *testing.T) {
	s := &SecurityLogs{Base: discard().Handler()}
	_, err := s.Open([]cache.SecurityLog{{Name: "x", Type: "Syslog", Server: "127.0.0.1:514", Protocol: "SCTP"}})
	if err == nil || !strings.Contains(err.Error(), "use TCP or UDP") {
		t.Fatalf("unknown protocol: %v", err)
	}
	for i := range maxSyslogServers {
		if _, err := s.Open([]cache.SecurityLog{{Name: "x", Type: "Syslog", Server: "127.0.0.1:" + strconv.Itoa(1000+i)}}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.Open([]cache.SecurityLog{{Name: "x", Type: "Syslog", Server: "127.0.0.1:9"}})
	if err == nil || !strings.Contains(err.Error(), "syslog servers") {
		t.Fatalf("past the bound: %v", err)
	}
}
