// Package junit writes JUnit XML reports, the format CI systems (GitLab,
// Jenkins, GitHub test reporters) read: `portal eval -o junit` and `portal
// test -o junit` share these types, so both reports read the same in CI.
package junit

import (
	"encoding/xml"
	"io"
)

// Suites is the document root.
type Suites struct {
	XMLName  xml.Name `xml:"testsuites"`
	Name     string   `xml:"name,attr,omitempty"`
	Tests    int      `xml:"tests,attr"`
	Failures int      `xml:"failures,attr"`
	Errors   int      `xml:"errors,attr"`
	Suites   []Suite  `xml:"testsuite"`
}

// Suite is one testsuite: a rule's results, or a test file's expectations.
type Suite struct {
	Name     string `xml:"name,attr"`
	File     string `xml:"file,attr,omitempty"`
	Tests    int    `xml:"tests,attr"`
	Failures int    `xml:"failures,attr"`
	Errors   int    `xml:"errors,attr"`
	Cases    []Case `xml:"testcase"`
}

// Case is one testcase.
type Case struct {
	Name      string   `xml:"name,attr"`
	ClassName string   `xml:"classname,attr"`
	File      string   `xml:"file,attr,omitempty"`
	Line      int      `xml:"line,attr,omitempty"`
	Failure   *Problem `xml:"failure,omitempty"`
	Error     *Problem `xml:"error,omitempty"`
	Skipped   *Skipped `xml:"skipped,omitempty"`
}

// Skipped marks a case that was not run (an exception exempted it).
type Skipped struct {
	Message string `xml:"message,attr"`
}

// Problem is a case's failure or error.
type Problem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// Write writes s as an indented XML document ending in a newline.
func Write(w io.Writer, s Suites) error {
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(s); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
