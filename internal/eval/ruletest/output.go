package ruletest

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/vilaca/portal/internal/junit"
)

// Formats lists the output formats Write takes.
var Formats = []string{"table", "junit", "json"}

// Summary counts what a run of test files found.
type Summary struct {
	Files      int `json:"files"`
	Broken     int `json:"broken"`
	Checks     int `json:"checks"`
	Mismatches int `json:"mismatches"`
}

// Summarize counts rs.
func Summarize(rs []FileResult) Summary {
	s := Summary{Files: len(rs)}
	for i := range rs {
		if rs[i].Err != nil {
			s.Broken++
		}
		s.Checks += len(rs[i].Checks)
		s.Mismatches += rs[i].Mismatches()
	}
	return s
}

// Write writes the results of a run in format: table (the mismatches and
// the broken tests, then a summary line), junit (one testsuite per file,
// one testcase per expectation) or json.
func Write(w io.Writer, format string, rs []FileResult) error {
	switch format {
	case "junit":
		return writeJUnit(w, rs)
	case "json":
		return writeJSON(w, rs)
	case "table":
		return writeTable(w, rs)
	}
	return fmt.Errorf("output %q: use one of %s", format, strings.Join(Formats, ", "))
}

func writeTable(w io.Writer, rs []FileResult) error {
	s := Summarize(rs)
	for _, r := range rs {
		if r.Err != nil {
			fmt.Fprintf(w, "BROKEN %s\n", safeLines(r.Err.Error(), "\n  "))
		}
	}
	if s.Mismatches > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "EXPECTATION\tRULE\tRESOURCE\tCONTAINER\tWANT\tGOT\tMESSAGE")
		for _, r := range rs {
			for _, c := range r.Checks {
				if c.OK {
					continue
				}
				fmt.Fprintf(tw, "%s:%d\t%s\t%s\t%s\t%s\t%s\t%s\n", safe(r.Path), c.Line, safe(c.Rule), safe(c.Resource), safe(c.Container), want(c.Expectation), safe(c.Got), safe(oneLine(firstMessage(c))))
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "%s, %s: %d passed, %d mismatched, %d broken\n",
		plural(s.Files, "test file"), plural(s.Checks, "expectation"), s.Checks-s.Mismatches, s.Mismatches, s.Broken)
	return err
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// want is the expected result, with the expected message when there is one.
func want(e Expectation) string {
	if e.Message == "" {
		return e.Result
	}
	return fmt.Sprintf("%s (message has %q)", safe(e.Result), e.Message)
}

func firstMessage(c Check) string {
	if len(c.Messages) == 0 {
		return ""
	}
	return c.Messages[0]
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// safe is s, or s quoted (strconv.Quote) when it holds a character that is
// not printable. A test file, its path and the messages of its rules are
// pull-request input, printed into CI logs: a raw newline could start a
// GitHub Actions workflow command (::error ...), an escape sequence could
// recolour or hide lines.
func safe(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return strconv.Quote(s)
	}
	return s
}

// safeLines is safe on each line of s, the lines joined by sep: an error
// holds lines of its own, each of which may quote input.
func safeLines(s, sep string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = safe(l)
	}
	return strings.Join(lines, sep)
}

// writeJUnit writes one testsuite per test file and one testcase per
// expectation; a broken file is a suite with one erroring testcase, so CI
// shows it rather than an empty suite.
func writeJUnit(w io.Writer, rs []FileResult) error {
	out := junit.Suites{Name: "portal test"}
	for _, r := range rs {
		name, path := safe(r.Name), safe(r.Path)
		s := junit.Suite{Name: name, File: path}
		if r.Err != nil {
			s.Tests, s.Errors = 1, 1
			s.Cases = []junit.Case{{Name: "load", ClassName: name, File: path,
				Error: &junit.Problem{Message: "broken test file", Type: "broken", Text: safeLines(r.Err.Error(), "\n")}}}
		}
		for _, c := range r.Checks {
			cn := safe(c.Rule) + " " + safe(c.Resource)
			if c.Container != "" {
				cn += " container " + safe(c.Container)
			}
			tc := junit.Case{Name: cn, ClassName: name, File: path, Line: c.Line}
			if !c.OK {
				s.Failures++
				msgs := make([]string, len(c.Messages))
				for i, m := range c.Messages {
					msgs[i] = safe(m)
				}
				tc.Failure = &junit.Problem{
					Message: fmt.Sprintf("want %s, got %s", want(c.Expectation), safe(c.Got)),
					Type:    "mismatch",
					Text:    fmt.Sprintf("%s:%d: %s on %s: want %s, got %s\n%s", path, c.Line, safe(c.Rule), safe(c.Resource), want(c.Expectation), safe(c.Got), strings.Join(msgs, "\n")),
				}
			}
			s.Tests++
			s.Cases = append(s.Cases, tc)
		}
		out.Tests += s.Tests
		out.Failures += s.Failures
		out.Errors += s.Errors
		out.Suites = append(out.Suites, s)
	}
	return junit.Write(w, out)
}

type jsonCheck struct {
	Line      int      `json:"line"`
	Rule      string   `json:"rule"`
	Resource  string   `json:"resource"`
	Container string   `json:"container,omitempty"`
	Want      string   `json:"want"`
	Message   string   `json:"message,omitempty"`
	Got       string   `json:"got"`
	Messages  []string `json:"messages,omitempty"`
	OK        bool     `json:"ok"`
}

type jsonFile struct {
	Path       string      `json:"path"`
	Name       string      `json:"name"`
	Error      string      `json:"error,omitempty"`
	Checks     []jsonCheck `json:"checks"`
	Unasserted int         `json:"unasserted"`
}

func writeJSON(w io.Writer, rs []FileResult) error {
	out := struct {
		Files   []jsonFile `json:"files"`
		Summary Summary    `json:"summary"`
	}{Files: []jsonFile{}, Summary: Summarize(rs)}
	for _, r := range rs {
		f := jsonFile{Path: r.Path, Name: r.Name, Checks: []jsonCheck{}, Unasserted: r.Unasserted}
		if r.Err != nil {
			f.Error = r.Err.Error()
		}
		for _, c := range r.Checks {
			f.Checks = append(f.Checks, jsonCheck{Line: c.Line, Rule: c.Rule, Resource: c.Resource, Container: c.Container,
				Want: c.Result, Message: c.Message, Got: c.Got, Messages: c.Messages, OK: c.OK})
		}
		out.Files = append(out.Files, f)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
