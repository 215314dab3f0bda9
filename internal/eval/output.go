package eval

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"

	"github.com/vilaca/portal/internal/junit"
)

// Formats lists the output formats Write accepts.
var Formats = []string{"table", "json", "yaml", "junit"}

// Write renders the report in format.
//
// A report evaluated with Options.Format "json", "yaml" or "junit" keeps
// only the encoded results, so it can only be written in that format; one
// evaluated for "table" keeps no passes, so it can only be written as a
// table.
func (r *Report) Write(w io.Writer, format string) error {
	for _, f := range []struct {
		is   bool
		name string
	}{{r.isJSON, "json"}, {r.isYAML, "yaml"}, {r.junit != nil, "junit"}} {
		if f.is && format != f.name {
			return fmt.Errorf("report was evaluated for %s output, not %q", f.name, format)
		}
	}
	if r.isTable && format != "table" && format != "" {
		return fmt.Errorf("report was evaluated for table output, which keeps no passes, not %q", format)
	}
	switch format {
	case "table", "":
		return r.writeTable(w)
	case "json":
		return r.writeJSON(w)
	case "yaml":
		if r.isYAML {
			return r.writeEncodedYAML(w)
		}
		b, err := yaml.Marshal(r)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "junit":
		if r.junit != nil {
			return r.junit.write(w, r.Summary)
		}
		return r.writeJUnit(w)
	}
	return fmt.Errorf("unknown output format %q: use one of %s", format, strings.Join(Formats, ", "))
}

func (res *Result) resourceName() string {
	if res.Resource.Namespace == "" {
		return res.Resource.Kind + "/" + res.Resource.Name
	}
	return res.Resource.Kind + "/" + res.Resource.Namespace + "/" + res.Resource.Name
}

// writeTable lists failures and errors, the rows a human acts on, and a
// summary line that counts the passes too.
func (r *Report) writeTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	shown := 0
	for i := range r.Results {
		res := &r.Results[i]
		if res.Result == "pass" && !r.tablePasses {
			continue
		}
		if shown == 0 {
			fmt.Fprintln(tw, "RESULT\tACTION\tSEVERITY\tRULE\tRESOURCE\tCONTAINER\tMESSAGE")
		}
		shown++
		container := res.Container
		if container == "" {
			container = "-"
		}
		message := oneLine(res.Message)
		if message == "" {
			message = "-" // a pass (--show-passes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", strings.ToUpper(res.Result), res.EnforcementAction,
			res.Severity, res.Rule, res.resourceName(), container, message)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Summary.Skip > 0 {
		_, err := fmt.Fprintf(w, "%d passed, %d failed, %d errors, %d skipped by exceptions\n", r.Summary.Pass, r.Summary.Fail, r.Summary.Error, r.Summary.Skip)
		return err
	}
	_, err := fmt.Fprintf(w, "%d passed, %d failed, %d errors\n", r.Summary.Pass, r.Summary.Fail, r.Summary.Error)
	return err
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// writeJUnit emits one test suite per rule and one test case per resource
// (and failing container), so CI systems show each violation as a failed test.
func (r *Report) writeJUnit(w io.Writer) error {
	out := junit.Suites{Tests: len(r.Results), Failures: r.Summary.Fail, Errors: r.Summary.Error}
	index := map[string]int{}
	for i := range r.Results {
		res := &r.Results[i]
		si, ok := index[res.Rule]
		if !ok {
			si = len(out.Suites)
			index[res.Rule] = si
			out.Suites = append(out.Suites, junit.Suite{Name: res.Rule})
		}
		s := &out.Suites[si]
		name := res.resourceName()
		if res.Container != "" {
			name += " container " + res.Container
		}
		tc := junit.Case{Name: name, ClassName: res.Rule}
		problem := &junit.Problem{Message: res.Message, Type: res.EnforcementAction + "/" + res.Severity, Text: res.Message}
		s.Tests++
		switch res.Result {
		case "fail":
			tc.Failure = problem
			s.Failures++
		case "error":
			tc.Error = problem
			s.Errors++
		case "skip":
			tc.Skipped = &junit.Skipped{Message: res.Message}
		}
		s.Cases = append(s.Cases, tc)
	}
	return junit.Write(w, out)
}

// writeEncodedYAML writes a report whose results the workers encoded as
// YAML sequence entries: the bytes yaml.Marshal writes for the whole
// report.
func (r *Report) writeEncodedYAML(w io.Writer) error {
	sum, err := yaml.Marshal(struct {
		Summary Summary `json:"summary"`
	}{r.Summary})
	if err != nil {
		return err
	}
	if r.spill != nil && r.spill.into != nil {
		return r.spill.finish(w, append([]byte("results: []\n"), sum...), sum)
	}
	var results io.Reader
	var size int64
	if r.spill != nil {
		rd, err := r.spill.contents(0)
		if err != nil {
			return err
		}
		results, size = rd, rd.Size()
	} else {
		chunks := make([]io.Reader, len(r.encoded))
		for i, c := range r.encoded {
			chunks[i] = bytes.NewReader(c)
			size += int64(len(c))
		}
		results = io.MultiReader(chunks...)
	}
	head := "results: []\n"
	if size > 0 {
		head = "results:\n"
	}
	if _, err := io.WriteString(w, head); err != nil {
		return err
	}
	if _, err := io.Copy(w, results); err != nil {
		return err
	}
	_, err = w.Write(sum)
	return err
}
