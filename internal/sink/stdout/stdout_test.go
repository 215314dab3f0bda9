package stdout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/vilaca/portal/internal/core"
	"github.com/vilaca/portal/internal/sink/stdout"
)

var rule = &core.Rule{Name: "r", Severity: core.SeverityLow, Category: "Best Practices"}

func obj(name string, msgs ...string) core.ObjectFindings {
	ref := core.ResourceRef{APIVersion: "v1", Kind: "Pod", Namespace: "ns", Name: name}
	of := core.ObjectFindings{Object: ref}
	for i, m := range msgs {
		of.Findings = append(of.Findings, core.Finding{
			Producer:  "audit",
			Result:    core.Result{Rule: rule, Resource: ref, Outcome: core.OutcomeFail, Container: string(rune('a' + i)), Message: m},
			FirstSeen: time.Unix(1700000000, 0),
		})
	}
	return of
}

// One JSON line per finding raised, changed and resolved.
func TestLines(t *testing.T) {
	var buf bytes.Buffer
	s := stdout.New(slog.New(slog.NewJSONHandler(&buf, nil)))
	ctx := context.Background()
	steps := []core.FindingBatch{
		{Full: true, Objects: []core.ObjectFindings{obj("p", "m1", "m2")}},
		{Objects: []core.ObjectFindings{obj("p", "m1 changed")}},
		{Objects: []core.ObjectFindings{obj("p")}},
	}
	for _, b := range steps {
		if err := s.Publish(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	var events []string
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		if m["rule"] != "r" || m["name"] != "p" || m["namespace"] != "ns" || m["kind"] != "Pod" {
			t.Errorf("line lacks the finding: %s", line)
		}
		if m["category"] != "Best Practices" {
			t.Errorf("line lacks the rule's category: %s", line)
		}
		if id, _ := m["resultID"].(string); m["producer"] != "audit" || len(id) != 32 {
			t.Errorf("line lacks the producer or the result ID: %s", line)
		}
		events = append(events, m["event"].(string)+"/"+m["container"].(string))
	}
	want := "raised/a raised/b changed/a resolved/b resolved/a"
	if got := strings.Join(events, " "); got != want {
		t.Errorf("events %q, want %q", got, want)
	}
}

// TestLinesAreBounded: a finding's message reaches the log cut to the bound
// every output keeps, whatever produced it (a NetworkPolicy of 40,000
// ipBlocks once made a 4.7 MB message).
func TestLinesAreBounded(t *testing.T) {
	var buf bytes.Buffer
	s := stdout.New(slog.New(slog.NewJSONHandler(&buf, nil)))
	if err := s.Publish(context.Background(), core.FindingBatch{Full: true, Objects: []core.ObjectFindings{obj("p", strings.Repeat("m", 1<<20))}}); err != nil {
		t.Fatal(err)
	}
	if n := buf.Len(); n > core.MaxOutputMessageBytes+1024 {
		t.Errorf("a line of %d bytes, want the message cut to %d", n, core.MaxOutputMessageBytes)
	}
}

// TestRecategorisedRuleChangesItsFindings: a rule edited to another
// category logs its open findings again as changed, with the new category,
// so the log (and every output fed the same way) never keeps the old one.
func TestRecategorisedRuleChangesItsFindings(t *testing.T) {
	var buf bytes.Buffer
	s := stdout.New(slog.New(slog.NewJSONHandler(&buf, nil)))
	ctx := context.Background()
	first := obj("p", "m")
	if err := s.Publish(ctx, core.FindingBatch{Full: true, Objects: []core.ObjectFindings{first}}); err != nil {
		t.Fatal(err)
	}
	edited := *rule
	edited.Category = "Pod Security Standards (Restricted)"
	again := obj("p", "m")
	again.Findings[0].Rule = &edited
	if err := s.Publish(ctx, core.FindingBatch{Objects: []core.ObjectFindings{again}}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var last map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2 || last["event"] != "changed" || last["category"] != edited.Category {
		t.Errorf("lines %q, want a changed line with category %q", lines, edited.Category)
	}
}
