package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vilaca/portal/internal/freeport"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

const (
	peerWAFProxy = "waf-proxy"
	peerNginx    = "nginx+modsecurity"
)

// nginxModule is where Debian's libnginx-mod-http-modsecurity puts the
// module.
const nginxModule = "/usr/lib/nginx/modules/ngx_http_modsecurity_module.so"

// peer is one WAF under test, running as a child process.
type peer struct {
	name    string
	url     string
	version string
	cmd     *exec.Cmd
	log     *os.File
}

func (p *peer) stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	}
	if p.log != nil {
		_ = p.log.Close()
	}
}

// startPeers starts the waf-proxy (its rule set served by an in-process
// cache server) and nginx with ModSecurity, both proxying to upstream, and
// waits until each answers a benign request with 200.
func startPeers(ctx context.Context, o options, l layout, work, upstream string) ([]*peer, error) {
	var peers []*peer
	cacheURL, err := startCache(ctx, work)
	if err != nil {
		return nil, err
	}
	w, err := startWAFProxy(ctx, o, l, work, cacheURL, upstream)
	if w != nil {
		peers = append(peers, w)
	}
	if err != nil {
		return peers, err
	}
	n, err := startNginx(ctx, l, work, upstream)
	if n != nil {
		peers = append(peers, n)
	}
	return peers, err
}

func startWAFProxy(ctx context.Context, o options, l layout, work, cacheURL, upstream string) (*peer, error) {
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		return nil, err
	}
	bin, err := filepath.Abs(o.portal)
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, bin, "version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s version: %v: %s (run `make build`)", bin, err, out)
	}
	logFile, err := os.Create(filepath.Join(work, "waf-proxy.log"))
	if err != nil {
		return nil, err
	}
	name, args := l.pin(l.peerCPUs, bin, "waf-proxy", "--cache-url", cacheURL, "--ruleset", "bench/crs",
		"--ca-file", filepath.Join(work, "ca.crt"), "--token-file", filepath.Join(work, "token"),
		"--upstream", "http://"+upstream, "--listen", addr, "--metrics-bind-address", "0", "--log-level", "warn")
	cmd := exec.Command(name, args...)
	if l.gomaxprocs > 0 {
		cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(l.gomaxprocs))
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	p := &peer{name: peerWAFProxy, url: "http://" + addr, version: strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", ", ")), " ") + ", Coraza v3.8.1", cmd: cmd, log: logFile}
	if err := cmd.Start(); err != nil {
		return p, err
	}
	return p, waitReady(ctx, p.url+"/")
}

// extractCRS copies the CRS files of the coraza-coreruleset module (the
// same files the waf-proxy embeds) to dir: crs-setup.conf and rules/.
func extractCRS(dir string) error {
	crs := ruleset.CRS()
	if err := os.MkdirAll(filepath.Join(dir, "rules"), 0o755); err != nil {
		return err
	}
	setup, err := fs.ReadFile(crs, "@crs-setup.conf.example")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "crs-setup.conf"), setup, 0o644); err != nil {
		return err
	}
	entries, err := fs.ReadDir(crs, "@owasp_crs")
	if err != nil {
		return err
	}
	for _, e := range entries {
		data, err := fs.ReadFile(crs, "@owasp_crs/"+e.Name())
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "rules", e.Name()), modsecCompat(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// actionless matches a chained SecRule with an operator and no actions.
var actionless = regexp.MustCompile(`(?m)^(\s*SecRule\s+\S+\s+"(?:[^"\\]|\\.)*")\s*$`)

// modsecCompat gives the two chained CRS rules that have no action list
// (SecRule TX:EARLY_BLOCKING "@eq 1" in 949 and 959) the no-op action
// "t:none": libmodsecurity 3.0.9's parser requires an action list, Coraza's
// does not. Nothing else changes.
func modsecCompat(conf []byte) []byte {
	return actionless.ReplaceAll(conf, []byte(`$1 "t:none"`))
}

const nginxConf = `%s
worker_processes %[6]s;
pid %[2]s/nginx.pid;
error_log %[2]s/nginx-error.log warn;
daemon off;
load_module %[3]s;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path %[2]s/tmp/body;
    proxy_temp_path %[2]s/tmp/proxy;
    fastcgi_temp_path %[2]s/tmp/fastcgi;
    uwsgi_temp_path %[2]s/tmp/uwsgi;
    scgi_temp_path %[2]s/tmp/scgi;
    upstream backend { server %[4]s; keepalive 64; }
    server {
        listen %[5]s;
        modsecurity on;
        modsecurity_rules_file %[2]s/modsecurity/main.conf;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
`

func startNginx(ctx context.Context, l layout, work, upstream string) (*peer, error) {
	if _, err := os.Stat(nginxModule); err != nil {
		return nil, fmt.Errorf("the ModSecurity nginx module is missing (%v): run `make bench-tools`", err)
	}
	msDir := filepath.Join(work, "modsecurity")
	if err := extractCRS(msDir); err != nil {
		return nil, fmt.Errorf("extract the CRS: %w", err)
	}
	main := "Include " + msDir + "/base.conf\nInclude " + msDir + "/crs-setup.conf\nInclude " + msDir + "/rules/*.conf\n"
	if err := os.WriteFile(filepath.Join(msDir, "base.conf"), []byte(benchRules), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(msDir, "main.conf"), []byte(main), 0o644); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(work, "tmp"), 0o755); err != nil {
		return nil, err
	}
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		return nil, err
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // workers write the temp paths under work
	}
	conf := filepath.Join(work, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, user, work, nginxModule, upstream, addr, l.nginxWorkers), 0o644); err != nil {
		return nil, err
	}
	nginx, err := lookPath("nginx")
	if err != nil {
		return nil, err
	}
	version, err := exec.CommandContext(ctx, nginx, "-v").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("nginx -v: %v: %s", err, version)
	}
	if out, err := exec.CommandContext(ctx, nginx, "-t", "-p", work, "-c", conf).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nginx -t: %v: %s", err, out)
	}
	logFile, err := os.Create(filepath.Join(work, "nginx.out"))
	if err != nil {
		return nil, err
	}
	name, args := l.pin(l.peerCPUs, nginx, "-p", work, "-c", conf)
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	p := &peer{name: peerNginx, url: "http://" + addr, version: strings.TrimSpace(string(version)) + ", " + modsecVersion(), cmd: cmd, log: logFile}
	if err := cmd.Start(); err != nil {
		return p, err
	}
	return p, waitReady(ctx, p.url+"/")
}

// modsecVersion names the installed libmodsecurity3 and module packages.
func modsecVersion() string {
	var parts []string
	for _, pkg := range []string{"libmodsecurity3", "libnginx-mod-http-modsecurity"} {
		out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", pkg).Output()
		if err == nil {
			parts = append(parts, pkg+" "+string(out))
		}
	}
	if len(parts) == 0 {
		return "ModSecurity (version unknown)"
	}
	return strings.Join(parts, ", ")
}

func lookPath(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err == nil {
		return p, nil
	}
	// nginx lives in /usr/sbin, which a non-root PATH may lack.
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && !fi.IsDir() {
			return filepath.Join(dir, name), nil
		}
	}
	return "", errors.Join(err, fs.ErrNotExist)
}
