package event_test

import (
	"os"
	"strings"
	"testing"

	"github.com/vilaca/portal/internal/context/event"
)

// TestReferenceListsEveryClassAndField: docs/reference/runtime-events.md
// has a row for every registered class, saying what it covers as the
// registry does, and for every field of the event context.
func TestReferenceListsEveryClassAndField(t *testing.T) {
	data, err := os.ReadFile("../../../docs/reference/runtime-events.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	for _, c := range event.Classes() {
		if !strings.Contains(page, "| `"+c.Name+"` | "+c.Doc+" |") {
			t.Errorf("the reference has no row for class %s saying %q", c.Name, c.Doc)
		}
	}
	for name := range event.Schema().Fields {
		if !strings.Contains(page, "`event."+name) {
			t.Errorf("the reference does not document event.%s", name)
		}
	}
}
