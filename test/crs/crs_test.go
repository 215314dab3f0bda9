package crs

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	crstests "github.com/corazawaf/coraza-coreruleset/v4/tests"
	"github.com/coreruleset/go-ftw/v2/config"
	"github.com/coreruleset/go-ftw/v2/output"
	"github.com/coreruleset/go-ftw/v2/runner"
	"github.com/coreruleset/go-ftw/v2/test"
	"github.com/rs/zerolog"

	"github.com/vilaca/portal/internal/pki"
	"github.com/vilaca/portal/internal/waf/cache"
	"github.com/vilaca/portal/internal/waf/proxy"
	"github.com/vilaca/portal/internal/waf/ruleset"
)

// testRuleSet is the RuleSet the suite runs: the full CRS v4.25 embedded in
// Portal, with the settings of the CRS project's own regression setup
// (tests/docker-compose.yml in coreruleset/coreruleset): detection only,
// paranoia level 4, response bodies inspected, the argument and file size
// limits the tests are written for, and rule 999999 writing the X-CRS-Test
// header go-ftw sends as a log marker. The SecDefaultAction lines give the
// response and logging phases ModSecurity's default (log); Coraza logs a
// rule without a log action only when its phase has such a default, and
// the CRS tests assume ModSecurity's.
const testRuleSet = `Include @coraza.conf-recommended
SecRuleEngine DetectionOnly
SecResponseBodyAccess On
SecResponseBodyMimeType text/plain text/html text/xml application/json
SecDefaultAction "phase:3,log,auditlog,pass"
SecDefaultAction "phase:4,log,auditlog,pass"
SecDefaultAction "phase:5,log,auditlog,pass"
SecAction "id:900005,phase:1,nolog,pass,t:none,\
  setvar:tx.blocking_paranoia_level=4,\
  setvar:tx.crs_validate_utf8_encoding=1,\
  setvar:tx.arg_name_length=100,\
  setvar:tx.arg_length=400,\
  setvar:tx.total_arg_length=6400,\
  setvar:tx.max_num_args=255,\
  setvar:tx.max_file_size=64100,\
  setvar:tx.combined_file_sizes=65535"
SecRule REQUEST_HEADERS:X-CRS-Test "@rx ^.*$" "id:999999,phase:1,pass,t:none,log,msg:'X-CRS-Test %{MATCHED_VAR}'"
Include @crs-setup.conf.example
Include @owasp_crs/*.conf
`

// include runs only the test cases whose id ("920100-4") matches, when
// set: go test ./test/crs -args -crs.include '^9591'. The pass rate is not
// checked then.
var include = flag.String("crs.include", "", "regular expression of the CRS test ids to run (default: all)")

// keepLog, when set, copies the proxy's log there for inspection.
var keepLog = flag.String("crs.log", "", "copy the waf-proxy log to this file")

// minPassRate is the share of the suite's test cases that must pass.
const minPassRate = 0.995

// TestCRSRegression runs every test case of the CRS regression suite
// embedded in coraza-coreruleset (4,674 at v4.25.0) with go-ftw against a
// waf-proxy that loaded the full CRS through the cache path: cache server,
// Poller, sandboxed compile. The matched-rule JSON lines the proxy logs are
// what go-ftw reads. Tests the proxy does not pass are listed, each with
// its reason, in overrides.yaml; any other failure fails this test.
func TestCRSRegression(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "waf.log")
	front := startProxy(t, logPath)
	tests := loadSuite(t)

	cfg, err := config.NewConfigFromFile("overrides.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.LogFile = logPath
	host, portText, _ := net.SplitHostPort(front)
	var port int
	if _, err := fmt.Sscan(portText, &port); err != nil {
		t.Fatal(err)
	}
	cfg.TestOverride.Overrides.DestAddr, cfg.TestOverride.Overrides.Port = &host, &port
	rc := config.NewRunnerConfiguration(cfg)
	if *include != "" {
		rc.Include = regexp.MustCompile(*include)
	}
	rc.ShowOnlyFailed = true
	// Generous: a loaded CI machine must not turn into a failed case.
	rc.ReadTimeout = 30 * time.Second

	zerolog.SetGlobalLevel(zerolog.WarnLevel)
	var out strings.Builder
	start := time.Now()
	res, err := runner.Run(rc, tests, output.NewOutput(string(output.Plain), &out))
	if err != nil {
		t.Fatalf("go-ftw: %v\n%s", err, out.String())
	}
	st := res.Stats
	total := len(st.Success) + len(st.Failed) + len(st.Ignored) + len(st.ForcedPass) + len(st.ForcedFail)
	if *include == "" {
		total += len(st.Skipped)
	}
	rate := float64(len(st.Success)) / float64(total)
	t.Logf("CRS regression suite: %d test cases, %d passed, %d failed, %d ignored (overrides.yaml), %d skipped; pass rate %.2f%%; %s",
		total, len(st.Success), len(st.Failed), len(st.Ignored), len(st.Skipped), 100*rate, time.Since(start).Round(time.Second))
	if len(st.Failed) > 0 {
		slices.Sort(st.Failed)
		t.Errorf("failed test cases not listed in overrides.yaml: %v\n%s", st.Failed, out.String())
	}
	if (*include == "" && len(st.Skipped) > 0) || len(st.ForcedPass) > 0 || len(st.ForcedFail) > 0 {
		t.Errorf("skipped %v, forced %v %v: overrides.yaml only ignores", st.Skipped, st.ForcedPass, st.ForcedFail)
	}
	if *keepLog != "" {
		if data, err := os.ReadFile(logPath); err == nil {
			_ = os.WriteFile(*keepLog, data, 0o600)
		}
	}
	if *include != "" {
		return
	}
	if rate < minPassRate {
		t.Errorf("pass rate %.2f%% is below %.1f%%", 100*rate, 100*minPassRate)
	}
}

// startProxy runs the waf-proxy in front of Echo, with the test rule set
// served by a real cache server and loaded by a Poller, logging JSON to
// logPath. It returns the proxy's address.
func startProxy(t *testing.T, logPath string) string {
	t.Helper()
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logFile.Close() })

	// The cache path as a data plane sees it: TLS verified against the
	// cache's own CA, a bearer token, the digest checked before compiling.
	c := cache.New(nil, nil)
	allow := cache.AuthorizerFunc(func(_ context.Context, token, _, _ string) (cache.Decision, error) {
		return cache.Decision{Allowed: token == "crs-token", Reason: cache.DenyUnauthenticated}, nil
	})
	cert, err := pki.NewSelfSigned(time.Now(), time.Hour, nil, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	cacheSrv := httptest.NewUnstartedServer(cache.NewServer(c, cache.ServerOptions{Authorizer: allow}, nil).Handler())
	cacheSrv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert.Serving}, MinVersion: tls.VersionTLS12}
	cacheSrv.StartTLS()
	t.Cleanup(cacheSrv.Close)
	id := ruleset.RevisionUUID(ruleset.Bundle{Rules: testRuleSet}.SHA256())
	c.Put(cache.Key("crs", "regression"), id, testRuleSet, nil)
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, cert.CABundle(), 0o600); err != nil {
		t.Fatal(err)
	}
	transport, err := cache.NewCATransport(caFile)
	if err != nil {
		t.Fatal(err)
	}
	client, err := cache.NewClient(cacheSrv.URL, &http.Client{Transport: transport, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	client.Token = func() (string, error) { return "crs-token", nil }

	backend := httptest.NewServer(Echo())
	t.Cleanup(backend.Close)
	log := slog.New(slog.NewJSONHandler(logFile, nil))
	p := &proxy.Proxy{Logger: log}
	if p.Upstream, err = p.Upstream.Parse(backend.URL); err != nil {
		t.Fatal(err)
	}
	poller := &proxy.Poller{Client: client, Namespace: "crs", Name: "regression", Interval: proxy.MinPollInterval, Target: p, Logger: log}
	if changed, err := poller.Poll(context.Background()); err != nil || !changed {
		t.Fatalf("loading the CRS through the cache: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := proxy.NewServer(p, proxy.DefaultServerOptions())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		p.Close()
	})
	return ln.Addr().String()
}

// loadSuite reads every test file of the embedded suite.
func loadSuite(t *testing.T) []*test.FTWTest {
	t.Helper()
	var tests []*test.FTWTest
	err := fs.WalkDir(crstests.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		data, err := fs.ReadFile(crstests.FS, path)
		if err != nil {
			return err
		}
		ft, err := test.GetTestFromYaml(data, path)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		tests = append(tests, ft)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(tests) == 0 {
		t.Fatal("no CRS tests embedded")
	}
	return tests
}
