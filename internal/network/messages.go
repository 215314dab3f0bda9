package network

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Bounds of a finding's message. A tenant writes the policy a message
// describes: one 1.3 MB policy of 40,000 broad ipBlocks made a 4.7 MB
// message, sent whole to Alertmanager, the log and every report. A finding
// names the first problems and counts the rest; the policy itself holds
// them all.
const (
	// MaxMessageItems is how many problems a finding's message lists.
	MaxMessageItems = 5
	// MaxMessageItemBytes bounds one listed problem (selectors quoted in it
	// are the tenant's, of any length).
	MaxMessageItemBytes = 256
	// MaxMessageBytes bounds a whole message, the count of what is not
	// listed included. It is the PolicyReport sink's bound on a result's
	// message, so the count survives into the report rather than being
	// cut off there.
	MaxMessageBytes = 1024
)

// Messages collects the problems one check finds on one object, keeping
// the first MaxMessageItems and counting the others without formatting
// them. A check that adds nothing raises no finding.
type Messages struct {
	items []string
	size  int
	more  int
}

// one is a message of a single problem.
func one(format string, args ...any) *Messages {
	m := &Messages{}
	m.Add(format, args...)
	return m
}

// Add records a problem; past the bounds it is only counted. Name the
// field at fault ("spec.ingress[0].from[1] ..."): the message is what the
// policy's owner reads.
func (m *Messages) Add(format string, args ...any) {
	if len(m.items) >= MaxMessageItems || m.size >= MaxMessageBytes {
		m.more++
		return
	}
	s := clip(fmt.Sprintf(format, args...), MaxMessageItemBytes)
	m.items = append(m.items, s)
	m.size += len(s) + len("; ")
}

func (m *Messages) empty() bool { return m == nil || len(m.items) == 0 }

// String joins the listed problems and says how many were left out, within
// MaxMessageBytes.
func (m *Messages) String() string {
	more := ""
	if m.more > 0 {
		more = fmt.Sprintf("; and %d more not listed", m.more)
	}
	return clip(strings.Join(m.items, "; "), MaxMessageBytes-len(more)) + more
}

// clip cuts s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	const mark = "…"
	if len(s) <= n {
		return s
	}
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
