package main

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testCorpus = "../../internal/eval/ruletest/testdata"

// TestTestExitCodes: 0 when every expectation matches, 1 on a mismatch, 2 on
// a broken test (even beside mismatches) or when no test file is found.
func TestTestExitCodes(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		code int
		want string
	}{
		"passing":        {[]string{"--root", testCorpus, testCorpus + "/pass"}, exitOK, "1 test file, 7 expectations: 7 passed, 0 mismatched, 0 broken"},
		"runtime events": {[]string{testCorpus + "/events"}, exitOK, "1 test file, 3 expectations: 3 passed, 0 mismatched, 0 broken"},
		"failing":        {[]string{"--root", testCorpus, testCorpus + "/pass", testCorpus + "/fail"}, exitViolation, "fail/portal-test.yaml:9   no-privileged  Pod/demo/debug"},
		"broken":         {[]string{"--root", testCorpus, testCorpus, testCorpus + "/broken/unknown-rule.yaml"}, exitUsage, `BROKEN ` + testCorpus + `/broken/unknown-rule.yaml:8: rule "team-lable"`},
		"none found":     {[]string{testCorpus + "/rules"}, exitUsage, ""},
		"missing path":   {[]string{testCorpus + "/nothing"}, exitUsage, "cannot read the tests: stat " + testCorpus + "/nothing: no such file or directory"},
		"unknown format": {[]string{"-o", "xml", testCorpus}, exitUsage, ""},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := runCLI(t, "", append([]string{"test"}, tc.args...)...)
			if code := exitCodeOf(err); code != tc.code {
				t.Fatalf("exit code %d, want %d: %v\n%s", code, tc.code, err, out)
			}
			if got := out + errText(err); !strings.Contains(got, tc.want) {
				t.Errorf("output and error lack %q:\n%s", tc.want, got)
			}
		})
	}
}

// TestTestJUnit: one testsuite per test file, one testcase per expectation,
// a failure per mismatch naming the expectation's line, and a broken file
// as an erroring suite.
func TestTestJUnit(t *testing.T) {
	out, err := runCLI(t, "", "test", "-o", "junit", "--root", testCorpus, testCorpus+"/pass", testCorpus+"/fail", testCorpus+"/broken/bad-result.yaml")
	if code := exitCodeOf(err); code != exitUsage {
		t.Fatalf("exit code %d, want %d: %v", code, exitUsage, err)
	}
	type tcase struct {
		Name    string `xml:"name,attr"`
		Line    int    `xml:"line,attr"`
		Failure *struct {
			Message string `xml:"message,attr"`
		} `xml:"failure"`
		Error *struct {
			Text string `xml:",chardata"`
		} `xml:"error"`
	}
	var doc struct {
		XMLName xml.Name `xml:"testsuites"`
		Tests   int      `xml:"tests,attr"`
		Fails   int      `xml:"failures,attr"`
		Errors  int      `xml:"errors,attr"`
		Suites  []struct {
			Name  string  `xml:"name,attr"`
			Tests int     `xml:"tests,attr"`
			Fails int     `xml:"failures,attr"`
			Cases []tcase `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JUnit XML: %v\n%s", err, out)
	}
	if len(doc.Suites) != 3 || doc.Tests != 13 || doc.Fails != 4 || doc.Errors != 1 {
		t.Fatalf("%d suites, %d tests, %d failures, %d errors; want 3, 13, 4, 1:\n%s", len(doc.Suites), doc.Tests, doc.Fails, doc.Errors, out)
	}
	pass, fail, broken := doc.Suites[0], doc.Suites[1], doc.Suites[2]
	if pass.Name != "everything matches" || len(pass.Cases) != 7 || pass.Fails != 0 {
		t.Errorf("passing suite %+v", pass)
	}
	if fail.Name != "mismatches" || len(fail.Cases) != 5 || fail.Fails != 4 {
		t.Errorf("failing suite %+v", fail)
	}
	first := fail.Cases[0]
	if first.Name != "no-privileged Pod/demo/debug" || first.Line != 9 || first.Failure == nil || first.Failure.Message != "want skip, got fail" {
		t.Errorf("first case %+v", first)
	}
	if fail.Cases[1].Failure != nil {
		t.Errorf("the matching expectation failed: %+v", fail.Cases[1])
	}
	if len(broken.Cases) != 1 || broken.Cases[0].Error == nil || !strings.Contains(broken.Cases[0].Error.Text, `result "deny"`) {
		t.Errorf("broken suite %+v", broken)
	}
}

// TestTestJSON: -o json reports every check and the summary.
func TestTestJSON(t *testing.T) {
	out, err := runCLI(t, "", "test", "-o", "json", "--root", testCorpus, testCorpus+"/fail")
	if code := exitCodeOf(err); code != exitViolation {
		t.Fatalf("exit code %d, want %d: %v", code, exitViolation, err)
	}
	var rep struct {
		Files []struct {
			Checks []struct {
				Line int    `json:"line"`
				Want string `json:"want"`
				Got  string `json:"got"`
				OK   bool   `json:"ok"`
			} `json:"checks"`
		} `json:"files"`
		Summary struct{ Files, Broken, Checks, Mismatches int } `json:"summary"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Files) != 1 || len(rep.Files[0].Checks) != 5 || rep.Summary.Mismatches != 4 || rep.Summary.Checks != 5 {
		t.Errorf("report %+v", rep)
	}
	if c := rep.Files[0].Checks[3]; c.Line != 21 || c.Want != "warn" || c.Got != "warn" || c.OK {
		t.Errorf("the message mismatch reads %+v", c)
	}
}

// TestTestEventsMismatch: a runtime rule's finding on a resource the test
// says passes is a mismatch at that expectation's line.
func TestTestEventsMismatch(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(testCorpus+"/events")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "portal-test.yaml")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	flipped := strings.Replace(string(src), "  result: fail", "  result: pass", 1)
	if err := os.WriteFile(path, []byte(flipped), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "", "test", dir)
	if code := exitCodeOf(err); code != exitViolation {
		t.Fatalf("exit code %d, want %d: %v\n%s", code, exitViolation, err, out)
	}
	if want := "portal-test.yaml:9  exec-in-prod  Pod/prod/web-0             pass (message has \"alice@example.com exec'd into web-0\")  fail"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}

// TestTestConfinement: every file a test reads resolves under the directory
// given (a FILE's own directory), or under --root; a link to a device is a
// broken test (exit 2) naming the file, never a read of it.
func TestTestConfinement(t *testing.T) {
	top := t.TempDir()
	if err := os.CopyFS(top, os.DirFS(testCorpus)); err != nil {
		t.Fatal(err)
	}
	pass := filepath.Join(top, "pass", "portal-test.yaml")
	zero := filepath.Join(top, "zero", "portal-test.yaml")
	if err := os.MkdirAll(filepath.Dir(zero), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		args []string
		code int
		want string
	}{
		"file names ../":        {[]string{pass}, exitUsage, "resolves outside " + filepath.Dir(pass)},
		"directory names ../":   {[]string{filepath.Dir(pass)}, exitUsage, "resolves outside " + filepath.Dir(pass)},
		"--root takes it in":    {[]string{"--root", top, pass}, exitOK, "7 passed, 0 mismatched, 0 broken"},
		"test file is a device": {[]string{filepath.Dir(zero)}, exitUsage, "BROKEN " + zero + ": " + zero + " is not a regular file"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := runCLI(t, "", append([]string{"test"}, tc.args...)...)
			if code := exitCodeOf(err); code != tc.code {
				t.Fatalf("exit code %d, want %d: %v\n%s", code, tc.code, err, out)
			}
			if got := out + errText(err); !strings.Contains(got, tc.want) {
				t.Errorf("output and error lack %q:\n%s", tc.want, got)
			}
		})
	}
}

// errText is err's message, or nothing for a nil error.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
