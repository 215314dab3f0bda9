package ruleset

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corazawaf/coraza/v3"
)

// TestCheckRejects covers every way out of the sandbox the pre-check knows.
func TestCheckRejects(t *testing.T) {
	data := map[string][]byte{"words.txt": []byte("evil\n")}
	cases := []struct {
		name, rules string
		kind        Kind
		want        string
	}{
		{"absolute include", "Include /etc/hostname", KindSandbox, "reaches outside"},
		{"relative include outside", "Include ../../etc/hostname", KindSandbox, "reaches outside"},
		{"include of a data file", "Include words.txt", KindSandbox, "RuleData files are data"},
		{"include climbing out of the crs", "Include @owasp_crs/../../etc/passwd", KindSandbox, "reaches outside"},
		{"include of a missing crs file", "Include @owasp_crs/NOPE.conf", KindInvalid, "no such file"},
		{"include glob matching nothing", "Include @owasp_crs/NOPE-*.conf", KindInvalid, "matches no file"},
		{"debug log file", "SecDebugLog /tmp/debug.log", KindSandbox, "SecDebugLog"},
		{"debug log to stdout", "SecDebugLog /dev/stdout", KindSandbox, "SecDebugLog"},
		{"audit log file", "SecAuditLog /var/log/audit.log", KindSandbox, "SecAuditLog"},
		{"audit log relative file", "SecAuditLog audit.log", KindSandbox, "SecAuditLog"},
		{"audit log storage dir", "SecAuditLogStorageDir /tmp/audit", KindSandbox, "SecAuditLogStorageDir"},
		{"concurrent audit log", "SecAuditLogType Concurrent", KindSandbox, "SecAuditLogType"},
		{"https audit log", "SecAuditLogType HTTPS", KindSandbox, "SecAuditLogType"},
		{"syslog audit log", "SecAuditLogType syslog", KindSandbox, "SecAuditLogType"},
		{"data dir", "SecDataDir /tmp/", KindSandbox, "SecDataDir"},
		{"upload dir", "SecUploadDir /tmp", KindSandbox, "SecUploadDir"},
		{"tmp dir", "SecTmpDir /tmp", KindSandbox, "SecTmpDir"},
		{"keep uploaded files", "SecUploadKeepFiles On", KindSandbox, "SecUploadKeepFiles"},
		{"rule script", `SecRuleScript /tmp/x.lua "id:1,deny"`, KindSandbox, "runs a script"},
		{"remote rules", "SecRemoteRules key https://example.com/rules", KindSandbox, "network"},
		{"geo db", "SecGeoLookupDb /usr/share/GeoIP.dat", KindSandbox, "host file"},
		{"pmFromFile absolute", `SecRule ARGS "@pmFromFile /etc/hostname" "id:1,deny"`, KindSandbox, "reaches outside"},
		{"pmFromFile climbing", `SecRule ARGS "@pmFromFile ../../../../etc/hostname" "id:1,deny"`, KindSandbox, "reaches outside"},
		{"pmf alias", `SecRule ARGS "@pmf /etc/hostname" "id:1,deny"`, KindSandbox, "reaches outside"},
		{"ipMatchFromFile", `SecRule REMOTE_ADDR "@ipMatchFromFile /etc/hosts" "id:1,deny"`, KindSandbox, "reaches outside"},
		{"validateSchema", `SecRule REQUEST_BODY "@validateSchema /etc/schema.json" "id:1,deny"`, KindSandbox, "reaches outside"},
		{"missing data file", `SecRule ARGS "@pmFromFile other.txt" "id:1,deny"`, KindInvalid, "no such file in the RuleSet's RuleData"},
		{"inspectFile", `SecRule FILES_TMPNAMES "@inspectFile /bin/sh" "id:1,deny"`, KindSandbox, "runs a program"},
		{"negated inspectFile", `SecRule FILES_TMPNAMES "!@inspectFile /bin/sh" "id:1,deny"`, KindSandbox, "runs a program"},
		{"rbl", `SecRule REMOTE_ADDR "@rbl sbl.example.org" "id:1,deny"`, KindSandbox, "DNS"},
		{"setenv", `SecRule ARGS "@rx x" "id:1,pass,setenv:PATH=/tmp"`, KindSandbox, "environment"},
		{"setenv in SecAction", `SecAction "id:1,pass,setenv:'A=b'"`, KindSandbox, "environment"},
		{"setenv in default action", `SecDefaultAction "phase:1,log,pass,setenv:A=b"`, KindSandbox, "environment"},
		{"setenv by update", `SecRuleUpdateActionById 1 "setenv:A=b"`, KindSandbox, "environment"},
		{"exec", `SecRule ARGS "@rx x" "id:1,pass,exec:/bin/sh"`, KindSandbox, "runs a program"},
		{"multi-line rule", "SecRule ARGS \"@rx x\" \\\n  \"id:1,pass,\\\n  setenv:A=b\"", KindSandbox, "environment"},
		{"unterminated continuation", `SecRule ARGS "@rx x" "id:1,deny" \`, KindInvalid, "continuation"},
		{"open backticks", "SecDataset d `\nfoo", KindInvalid, "backtick"},
		{"ignored compile errors", "SecIgnoreRuleCompilationErrors On", KindInvalid, "dropped silently"},
		{"overlong line", "# " + strings.Repeat("x", MaxLineLength), KindInvalid, "longer than"},
		{"overlong line by its carriage return", strings.Repeat("x", MaxLineLength) + "\r\nSecDebugLog /tmp/x", KindInvalid, "longer than"},
		{"tab before an update's actions", "SecRuleUpdateActionById 1\t\"setenv:A=b\"", KindSandbox, "environment"},
		{"update of two ids", `SecRuleUpdateActionById 1 2 "setenv:A=b"`, KindSandbox, "environment"},
		{"update of an id range", `SecRuleUpdateActionById 1-9 "exec:/bin/sh"`, KindSandbox, "runs a program"},
		{"audit log with a leading space", "SecAuditLog  /dev/stdout", KindSandbox, "SecAuditLog"},
		{"keep files with a leading space", "SecUploadKeepFiles  Off", KindSandbox, "SecUploadKeepFiles"},
		{"include with a leading space", `Include " @owasp_crs/*.conf"`, KindInvalid, "spaces"},
		{"CRLF continuation", "SecRule ARGS \"@rx x\" \\\r\n  \"id:1,pass,setenv:A=b\"", KindSandbox, "environment"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			problems := Check(Bundle{Rules: tc.rules + "\n", DataFiles: data})
			if len(problems) == 0 {
				t.Fatalf("no problem found in %q", tc.rules)
			}
			p := problems[0]
			if p.Kind != tc.kind || !strings.Contains(p.Message, tc.want) {
				t.Fatalf("got %s %q, want %s containing %q", p.Kind, p.Message, tc.kind, tc.want)
			}
		})
	}
}

// TestCheckAllows covers what must stay allowed.
func TestCheckAllows(t *testing.T) {
	data := map[string][]byte{"words.txt": []byte("evil\n"), "schema.json": []byte(`{"type":"object"}`)}
	for _, rules := range []string{
		"Include @coraza.conf-recommended\nInclude @crs-setup.conf.example\nInclude @owasp_crs/*.conf",
		"Include @owasp_crs/REQUEST-901-INITIALIZATION.conf",
		`SecRule ARGS "@pmFromFile words.txt" "id:1,deny"`,
		`SecRule ARGS "@pmFromFile ./words.txt" "id:1,deny"`,
		`SecRule REQUEST_BODY "@validateSchema schema.json" "id:1,deny"`,
		`SecRule REQUEST_URI "@pmFromFile @owasp_crs/restricted-files.data" "id:1,deny"`,
		"SecAuditLog /dev/stdout\nSecAuditLogType Serial\nSecAuditEngine RelevantOnly",
		"SecUploadKeepFiles Off",
		`SecRule ARGS "@rx setenv:x" "id:1,deny,msg:'no setenv: or exec: here'"`,
		"# SecDebugLog /tmp/commented-out.log\nSecRuleEngine On",
	} {
		if problems := Check(Bundle{Rules: rules + "\n", DataFiles: data}); len(problems) > 0 {
			t.Errorf("%q: unexpected problems %v", rules, problems)
		}
	}
}

// escapes are rule sets that would read host files or create files if
// Coraza compiled them unchecked.
func escapes(dir string) []string {
	return []string{
		"Include /etc/hostname",
		"Include ../../../../../../etc/hostname",
		`SecRule ARGS "@pmFromFile /etc/hostname" "id:1,deny"`,
		`SecRule ARGS "@pmFromFile ../../../../../../etc/hostname" "id:1,deny"`,
		`SecRule ARGS "@ipMatchFromFile /etc/hosts" "id:1,deny"`,
		"SecDebugLog debug.log\nSecDebugLogLevel 9",
		"SecDebugLog " + filepath.Join(dir, "debug.log"),
		"SecAuditEngine On\nSecAuditLog audit.log",
		"SecAuditEngine On\nSecAuditLog " + filepath.Join(dir, "audit.log"),
		"SecAuditEngine On\nSecAuditLogType Concurrent\nSecAuditLog " + filepath.Join(dir, "c.log") +
			"\nSecAuditLogStorageDir " + filepath.Join(dir, "storage"),
		"SecUploadDir " + dir + "\nSecUploadKeepFiles On",
		`SecRule FILES_TMPNAMES "@inspectFile /bin/sh" "id:1,deny"`,
	}
}

// snapshot lists every file under dir with its size and modification time.
func snapshot(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %s %d", p, info.ModTime(), info.Size()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestSandboxLeavesFilesystemUntouched proves the sandbox: Coraza left alone
// creates a log file at compile time, while every escape attempt compiled
// through Compile fails with a sandbox error and leaves the working
// directory and the temporary directory exactly as they were. Below the
// pre-check, the sandbox filesystem alone still keeps host files out.
func TestSandboxLeavesFilesystemUntouched(t *testing.T) {
	work, tmp := t.TempDir(), t.TempDir()
	t.Chdir(work)
	t.Setenv("TMPDIR", tmp)

	// Coraza left alone: the debug log file appears as the rules compile.
	if _, err := coraza.NewWAF(coraza.NewWAFConfig().WithDirectives("SecDebugLog " + filepath.Join(tmp, "raw.log"))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "raw.log")); err != nil {
		t.Fatalf("control: Coraza did not create its debug log: %v", err)
	}
	if err := os.Remove(filepath.Join(tmp, "raw.log")); err != nil {
		t.Fatal(err)
	}

	beforeWork, beforeTmp := snapshot(t, work), snapshot(t, tmp)
	for _, rules := range escapes(tmp) {
		_, err := Compile(Bundle{Rules: rules + "\n"}, Options{})
		e, ok := AsError(err)
		if !ok || e.Kind() != KindSandbox {
			t.Errorf("%q: got %v, want a sandbox error", rules, err)
		}
	}
	if got := snapshot(t, work); !slices.Equal(got, beforeWork) {
		t.Errorf("working directory changed:\nbefore %v\nafter  %v", beforeWork, got)
	}
	if got := snapshot(t, tmp); !slices.Equal(got, beforeTmp) {
		t.Errorf("temporary directory changed:\nbefore %v\nafter  %v", beforeTmp, got)
	}

	// Defence in depth: compiled without the pre-check, reads of host files
	// still fail, because the sandbox filesystem is all Coraza sees.
	for _, rules := range escapes(tmp)[:5] {
		if _, err := newWAF(context.Background(), Bundle{}, "rs-x", rules+"\n", Options{}, nil, nil, nil); err == nil {
			t.Errorf("%q compiled against the sandbox filesystem", rules)
		} else if !strings.Contains(err.Error(), "not exist") {
			t.Errorf("%q: %v, want file does not exist", rules, err)
		}
	}
}

// TestEngineRefusesWithoutPreCheck compiles every escape straight through
// Coraza, as if the pre-check had missed it: the engine's replacements
// (actions, operators, audit log writers) and the directive guard refuse
// each one, and no file appears and no environment variable changes.
func TestEngineRefusesWithoutPreCheck(t *testing.T) {
	work, tmp := t.TempDir(), t.TempDir()
	t.Chdir(work)
	t.Setenv("TMPDIR", tmp)
	t.Setenv("PORTAL_SANDBOX_PROBE", "unchanged")
	// Coraza probes that the temporary directory is writable for every WAF
	// it creates (a file created and removed): only files count here.
	beforeWork, beforeTmp := snapshot(t, work)[1:], snapshot(t, tmp)[1:]
	rules := append(escapes(tmp)[5:],
		`SecRule ARGS "@rx x" "id:1,pass,setenv:PORTAL_SANDBOX_PROBE=changed"`,
		`SecAction "id:1,pass,setenv:PORTAL_SANDBOX_PROBE=changed"`,
		"SecDefaultAction \"phase:2,log,pass,setenv:PORTAL_SANDBOX_PROBE=changed\"\nSecRule ARGS \"@rx x\" \"id:2\"",
		"SecRule ARGS \"@rx x\" \"id:1,pass\"\nSecRuleUpdateActionById 1\t\"setenv:PORTAL_SANDBOX_PROBE=changed\"",
		`SecRule ARGS "@rx x" "id:1,pass,exec:/bin/sh"`,
		`SecRule REMOTE_ADDR "@rbl sbl.example.org" "id:1,deny"`,
		"SecAuditLogType HTTPS\nSecAuditLog https://example.com/",
		"SecAuditLogType Syslog\nSecAuditLog udp://127.0.0.1:514",
		"SecAuditLog  /dev/stdout",
		"SecTmpDir /tmp",
		"SecRemoteRules key https://127.0.0.1:1/rules",
	)
	for _, r := range rules {
		w, err := newWAF(context.Background(), Bundle{}, "rs-x", r+"\n", Options{}, nil, nil, nil)
		if err == nil {
			if tx := w.NewTransaction(); tx != nil {
				tx.ProcessURI("/?a=x", "GET", "HTTP/1.1")
				tx.ProcessRequestHeaders()
				_, _ = tx.ProcessRequestBody()
				_ = tx.Close()
			}
			t.Errorf("%q compiled on the engine", r)
			continue
		}
		if !strings.Contains(err.Error(), refusal) {
			t.Errorf("%q: %v, want the engine's refusal", r, err)
		}
	}
	if got := os.Getenv("PORTAL_SANDBOX_PROBE"); got != "unchanged" {
		t.Errorf("the process environment changed: %q", got)
	}
	if got := snapshot(t, work)[1:]; !slices.Equal(got, beforeWork) {
		t.Errorf("working directory changed:\nbefore %v\nafter  %v", beforeWork, got)
	}
	if got := snapshot(t, tmp)[1:]; !slices.Equal(got, beforeTmp) {
		t.Errorf("temporary directory changed:\nbefore %v\nafter  %v", beforeTmp, got)
	}
	// The Core Rule Set still compiles on the engine (it uses initcol).
	if _, err := Compile(Bundle{Rules: crsRules}, Options{}); err != nil {
		t.Fatalf("CRS: %v", err)
	}
}

// TestCheckReadsEachSourceAlone: a continuation or an open backtick block
// at the end of one RuleSource would swallow the next one's first line in
// the joined bundle; the check reports it on the source that ends open.
func TestCheckReadsEachSourceAlone(t *testing.T) {
	for _, first := range []string{
		"SecRule ARGS \"@rx x\" \"id:1,pass,msg:'a'\" \\",
		"SecAction \\",
		"SecDataset words `\nevil",
	} {
		b := Join([]Source{{Name: "first", Rules: first}, {Name: "second", Rules: "SecRuleEngine Off\nSecRule ARGS \"@rx y\" \"id:2,deny\""}})
		problems := Check(b)
		if len(problems) == 0 || problems[0].Source != "first" || problems[0].Kind != KindInvalid {
			t.Errorf("%q: problems %v, want one on RuleSource first", first, problems)
		}
	}
}

// TestConsoleAuditLogStillWorks: the engine's Serial writer still writes
// audit entries to standard output, the one audit log the sandbox allows.
func TestConsoleAuditLogStillWorks(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	c, err := Compile(Bundle{Rules: "SecRuleEngine On\nSecAuditEngine On\nSecAuditLogFormat JSON\nSecAuditLog /dev/stdout\n" +
		"SecRule ARGS \"@rx evil\" \"id:7,phase:1,deny,status:403,log,auditlog\"\n"}, Options{})
	os.Stdout = stdout
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tx := c.WAF.NewTransaction()
	tx.ProcessURI("/?q=evil", "GET", "HTTP/1.1")
	if it := tx.ProcessRequestHeaders(); it == nil || it.Status != 403 {
		t.Fatalf("interruption %+v", it)
	}
	tx.ProcessLogging()
	_ = tx.Close()
	_ = w.Close()
	out, err := io.ReadAll(r)
	if err != nil || !strings.Contains(string(out), `"uri":"/?q=evil"`) || !strings.Contains(string(out), `"is_interrupted":true`) {
		t.Fatalf("audit output %q, %v", out, err)
	}
}
