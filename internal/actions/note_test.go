package actions_test

import (
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/actions"
	"github.com/vilaca/portal/internal/core"
)

// TestEventNoteFitsTheAPI: an attempt's Event note quotes the rule and the
// detail; past 1 KiB the API server rejected the Event ("Server rejected
// event"), so the note is cut and marked.
func TestEventNoteFitsTheAPI(t *testing.T) {
	note := actions.EventNote(strings.Repeat("r", 253), strings.Repeat("d", 4096))
	if len(note) > core.MaxEventNoteBytes || !strings.HasSuffix(note, "[truncated]") || !strings.HasPrefix(note, "rule rrr") {
		t.Errorf("note of %d bytes (%.40q...%q), want at most %d, cut and marked", len(note), note, note[max(len(note)-20, 0):], core.MaxEventNoteBytes)
	}
	if got := actions.EventNote("r", "labelled"); got != "rule r: labelled" {
		t.Errorf("short note %q", got)
	}
}
